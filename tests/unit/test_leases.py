"""The lease keeper survives whatever Redis answers, and says so once per outage."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis import exceptions as rex

from fastq.heartbeat import RETRY_MAX_S, LeaseKeeper
from fastq.keys import QueueKeys


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
