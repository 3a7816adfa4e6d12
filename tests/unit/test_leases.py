"""The lease keeper survives whatever Redis answers, and says so once per outage."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis import exceptions as rex

from fastq.protocol.keys import QueueKeys
from fastq.worker.leases import RETRY_MAX_S, LeaseKeeper


class FlakyClient:
    """Answers EVALSHA with the errors queued, then with 1."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def execute_command(self, *args: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return 1

    def close(self) -> None:
        pass


def keeper(client: FlakyClient) -> LeaseKeeper:
    return LeaseKeeper(lambda: client, "w1", [QueueKeys("t", "q")], 60_000)  # type: ignore[arg-type,return-value]


def test_out_of_memory_and_timeouts_are_retried_soon_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    oom = rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    client = FlakyClient(oom, oom, rex.TimeoutError("Timeout reading from socket"))
    leases = keeper(client)
    with caplog.at_level(logging.WARNING, logger="fastq.worker"):
        retries = [leases.extend_leases() for _ in range(3)]
        assert leases.extend_leases() is None  # extended
    assert all(r is not None and 0 < r <= 5.0 for r in retries)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines  # out of memory; then unavailable; then back
    assert "Redis out of memory" in lines[0] and "Redis unavailable" in lines[1]
    assert "Redis back after" in lines[2]


def test_a_bug_is_logged_with_its_traceback_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    leases = keeper(FlakyClient(rex.ResponseError("WRONGTYPE Operation against a key")))
    with caplog.at_level(logging.ERROR, logger="fastq.worker"):
        assert leases.extend_leases() == RETRY_MAX_S
    assert caplog.records[0].exc_info is not None
    assert leases.extend_leases() is None


class PerQueueClient(FlakyClient):
    """Answers EXTEND with the error set for its queue (every time), else with 1."""

    def __init__(self, errors: dict[str, BaseException]) -> None:
        super().__init__()
        self.by_queue = errors
        self.called: list[str] = []

    def execute_command(self, *args: Any) -> Any:
        queue = args[3].decode() if isinstance(args[3], bytes) else args[3]  # KEYS[1]
        queue = queue[queue.index("{") + 1 : queue.index("}")]
        self.called.append(queue)
        if queue in self.by_queue:
            raise self.by_queue[queue]
        return 1


def keeper_of(client: PerQueueClient, queues: list[str]) -> LeaseKeeper:
    keys = [QueueKeys("t", q) for q in queues]
    return LeaseKeeper(lambda: client, "w1", keys, 60_000)  # type: ignore[arg-type,return-value]


def test_a_queue_whose_extension_fails_costs_the_others_nothing() -> None:
    client = PerQueueClient({"a": rex.ResponseError("WRONGTYPE Operation against a key")})
    assert keeper_of(client, ["a", "b", "c"]).extend_leases() == RETRY_MAX_S
    assert client.called == ["a", "b", "c"]


def test_a_redis_that_does_not_answer_is_called_once_a_round() -> None:
    """A single Redis timing out costs one call timeout a round, not one per queue."""
    client = PerQueueClient({"a": rex.TimeoutError("Timeout reading from socket")})
    leases = keeper_of(client, ["a", "b", "c"])
    for _ in range(2):
        retry_s = leases.extend_leases()
        assert retry_s is not None and retry_s <= 5.0
    assert client.called == ["a", "a"]


def test_an_extension_refused_as_stale_is_tried_again_quietly_with_the_workers_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process that had this worker's id before left a newer epoch in Redis: the
    worker's loop moves past it at its next round trip, and the keeper sends the
    epoch the loop holds then."""
    client = FlakyClient(rex.ResponseError("STALE epoch 0 < 3: a request its worker gave up on"))
    epoch = [0]
    leases = LeaseKeeper(
        lambda: client,  # type: ignore[arg-type,return-value]
        "w1",
        [QueueKeys("t", "q")],
        60_000,
        epoch=lambda: epoch[0],
    )
    sent: list[Any] = []
    real = client.execute_command
    client.execute_command = lambda *args: (sent.append(args[-1]), real(*args))[1]  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="fastq.worker"):
        assert leases.extend_leases() == RETRY_MAX_S
        epoch[0] = 4
        assert leases.extend_leases() is None
    assert caplog.records == []
    assert sent == [0, 4]  # the epoch is the last ARGV
