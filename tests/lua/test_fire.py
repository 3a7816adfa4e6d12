"""The ``fire`` script on a real server: each slot of a periodic job fires once,
whoever calls and however late, and a refused call writes nothing."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from fastq.protocol.contracts import ACK, CLAIM, FIRE, FireOutcome, FireReply
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from tests.support.keys import namespace_keys


def fire(
    r: redis.Redis,
    k: QueueKeys,
    slot_ms: int,
    *,
    name: str = "tick",
    overlap: bool = False,
    priority: int = 0,
) -> FireReply:
    job_id = f"periodic:{name}:{slot_ms}"
    env = orjson.dumps({"id": job_id, "args": [], "kwargs": {}, "name": name, "queue": "q"})
    argv = FIRE.argv(name, slot_ms, overlap, priority, job_id, env)
    return FIRE.call(r, FIRE.keys_for(k), argv)


def now_ms() -> int:
    return int(time.time() * 1000)


def finish(r: redis.Redis, k: QueueKeys, n: int = 100) -> list[str]:
    """A worker claims and completes what is ready; returns the ids it ran."""
    reply = CLAIM.call(r, CLAIM.keys_for(k, "w"), CLAIM.argv("w", n, 60_000, 100))
    out = Outcomes(done=list(reply.ids))
    ACK.call(r, ACK.keys_for(k, "w"), out.ack_argv(10**9, 1000))
    return [i.decode() for i in reply.ids]


def test_a_slot_fires_once_even_after_its_run_finished(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() // 1000 * 1000
    first = fire(r, k, slot)
    assert (first.outcome, first.last_slot_ms) == (FireOutcome.FIRED, -1)
    assert fire(r, k, slot).outcome is FireOutcome.ALREADY  # a second reaper, at once
    assert finish(r, k) == [f"periodic:tick:{slot}"]
    assert r.hexists(k.jobs, f"periodic:tick:{slot}") == 0  # the envelope is gone...
    late = fire(r, k, slot)  # ...and a late reaper still does not fire it again
    assert (late.outcome, late.last_slot_ms) == (FireOutcome.ALREADY, slot)
    assert fire(r, k, slot - 1000).outcome is FireOutcome.ALREADY  # nor an older slot
    assert r.llen(k.ready) == 0
    assert r.hget(k.stats, "enqueued") == b"1"
    assert r.hget(k.periodic, "tick") == str(slot).encode()


def test_the_next_slot_fires_and_wakes_a_worker(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() // 1000 * 1000
    fire(r, k, slot - 1000)
    finish(r, k)
    r.delete(k.wake)
    assert fire(r, k, slot).outcome is FireOutcome.FIRED
    assert r.lrange(k.ready, 0, -1) == [f"periodic:tick:{slot}".encode()]
    assert r.llen(k.wake) == 1


def test_no_stacking_while_the_last_run_is_queued_or_running(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() // 1000 * 1000 - 5000
    assert fire(r, k, slot).outcome is FireOutcome.FIRED
    # queued: the next slot is skipped, and counts as fired
    assert fire(r, k, slot + 1000).outcome is FireOutcome.SKIPPED
    assert fire(r, k, slot + 1000).outcome is FireOutcome.ALREADY
    # running (claimed, not acknowledged): skipped again
    CLAIM.call(r, CLAIM.keys_for(k, "w"), CLAIM.argv("w", 10, 60_000, 100))
    assert fire(r, k, slot + 2000).outcome is FireOutcome.SKIPPED
    assert r.hget(k.stats, "periodic_skipped") == b"2"
    # once it is done, the next slot fires
    ACK.call(
        r,
        ACK.keys_for(k, "w"),
        Outcomes(done=[f"periodic:tick:{slot}".encode()]).ack_argv(10**9, 1000),
    )
    assert fire(r, k, slot + 3000).outcome is FireOutcome.FIRED
    assert r.hget(k.stats, "enqueued") == b"2"


def test_a_dead_last_run_does_not_block_the_schedule(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() // 1000 * 1000 - 5000
    fire(r, k, slot)
    job_id = f"periodic:tick:{slot}".encode()
    CLAIM.call(r, CLAIM.keys_for(k, "w"), CLAIM.argv("w", 10, 60_000, 100))
    out = Outcomes(dead=[(job_id, b'{"id":"x","error":"boom"}')], failed=1)
    ACK.call(r, ACK.keys_for(k, "w"), out.ack_argv(10**9, 1000))
    assert r.zscore(k.dead, job_id) is not None and r.hexists(k.jobs, job_id)
    assert fire(r, k, slot + 1000).outcome is FireOutcome.FIRED


def test_overlap_fires_every_slot(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() // 1000 * 1000 - 5000
    for s in range(slot, slot + 3000, 1000):
        assert fire(r, k, s, overlap=True).outcome is FireOutcome.FIRED
    assert r.llen(k.ready) == 3


def test_a_priority_goes_to_the_prio_zset(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    slot = now_ms() - 1
    assert fire(r, k, slot, priority=5).outcome is FireOutcome.FIRED
    assert r.zrange(k.prio, 0, -1) == [f"periodic:tick:{slot}".encode()]
    assert finish(r, k) == [f"periodic:tick:{slot}"]


def test_a_slot_ahead_of_redis_clock_writes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    reply = fire(r, k, now_ms() + 60_000)
    assert reply.outcome is FireOutcome.NOT_DUE
    assert abs(reply.now_ms - now_ms()) < 1000
    assert namespace_keys(r, namespace) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["", 1000, 0, 0, "periodic:x:1", b"{}"],  # no name
        ["x", -1, 0, 0, "periodic:x:1", b"{}"],  # negative slot
        ["x", "soon", 0, 0, "periodic:x:1", b"{}"],  # slot not a number
        ["x", 1000, 2, 0, "periodic:x:1", b"{}"],  # overlap not 0/1
        ["x", 1000, 0, 2**21, "periodic:x:1", b"{}"],  # priority out of range
        ["x", 1000, 0, 0, "", b"{}"],  # no id
        ["x", 1000, 0, 0, "fastq:x", b"{}"],  # reserved id
        ["x", 1000, 0, 0, "periodic:x:1", b""],  # no envelope
    ],
)
def test_bad_arguments_are_refused_before_any_write(
    r: redis.Redis, namespace: str, argv: list[object]
) -> None:
    k = QueueKeys(namespace, "q")
    with pytest.raises(redis.ResponseError, match="fire"):
        FIRE.call(r, FIRE.keys_for(k), argv)
    assert namespace_keys(r, namespace) == []
