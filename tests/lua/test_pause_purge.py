"""claim.lua on a paused queue, and purge.lua, on a real server."""

from __future__ import annotations

import pytest
import redis
from test_scripts import claim, claimed_ids, enqueue, env

from fastq.protocol import control
from fastq.protocol.contracts import PAUSED, PURGE
from fastq.protocol.keys import QueueKeys
from tests.support.keys import namespace_keys


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def purge(r: redis.Redis, k: QueueKeys, limit: int, *flags: int) -> int:
    """Jobs deleted (asserted to be the ids taken: no cancelled id in these tests)."""
    taken, deleted = PURGE.call(r, PURGE.keys_for(k), PURGE.argv(limit, *map(bool, flags)))
    assert taken == deleted
    return deleted


def test_a_paused_claim_takes_nothing_and_says_paused_not_empty(
    r: redis.Redis, k: QueueKeys
) -> None:
    enqueue(r, k, ["a", "b"])
    enqueue(r, k, ["s"], delay_ms=1)
    control.pause(r, k)
    reply = claim(r, k, "w1", 10)
    assert (len(reply), reply.paused, reply.next_due_ms) == (0, True, PAUSED)
    assert r.llen(k.ready) == 2 and not r.exists(k.held("w1"))
    control.resume(r, k)
    assert r.lpop(k.wake) is not None  # the resume woke the idle workers
    reply = claim(r, k, "w1", 10)
    assert not reply.paused and sorted(claimed_ids(reply))[:2] == ["a", "b"]


def test_a_queue_never_paused_has_no_settings_key(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a"])
    assert claimed_ids(claim(r, k, "w1", 10)) == ["a"]
    assert not r.exists(k.settings)


def test_purge_deletes_ready_prio_and_scheduled_but_never_held_jobs(
    r: redis.Redis, k: QueueKeys
) -> None:
    enqueue(r, k, ["h1", "h2"])
    assert sorted(claimed_ids(claim(r, k, "w1", 2))) == ["h1", "h2"]  # in flight
    enqueue(r, k, [f"r{i}" for i in range(5)])
    enqueue(r, k, ["p1", "p2"], priority=3)
    enqueue(r, k, ["s1", "s2"], priority=2, delay_ms=60_000)  # sched_prio entries
    assert r.hlen(k.sched_prio) == 2
    assert purge(r, k, 4, 1, 1, 0, 0) == 4  # bounded by limit
    assert purge(r, k, 4, 1, 1, 0, 0) == 4
    assert purge(r, k, 4, 1, 1, 0, 0) == 1  # short: the sections are empty
    assert purge(r, k, 4, 1, 1, 0, 0) == 0
    assert sorted(r.hkeys(k.jobs)) == [b"h1", b"h2"]
    assert r.llen(k.ready) == 0 and r.zcard(k.prio) == 0 and r.zcard(k.scheduled) == 0
    assert not r.exists(k.sched_prio)
    assert r.hget(k.stats, "purged") == b"9"


def test_purge_takes_a_cancelled_jobs_id_but_counts_only_jobs(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a", "b", "c"])
    r.hdel(k.jobs, "b")  # as a cancel leaves it: the envelope gone, the id still listed
    r.zadd(k.cancelled, {"b": 1})
    assert PURGE.call(r, PURGE.keys_for(k), PURGE.argv(2, True, False, False, False)) == (2, 1)
    assert PURGE.call(r, PURGE.keys_for(k), PURGE.argv(2, True, False, False, False)) == (1, 1)
    assert PURGE.call(r, PURGE.keys_for(k), PURGE.argv(2, True, False, False, False)) == (0, 0)
    assert r.hget(k.stats, "purged") == b"2" and not r.exists(k.jobs)


def test_purge_selects_sections(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["r1"])
    enqueue(r, k, ["s1"], delay_ms=60_000)
    r.zadd(k.dead, {"d1": 1})
    r.hset(k.poison, "d1", "stalled 3 times")
    r.hset(k.broken, "b1", "no such job")
    r.hset(k.jobs, mapping={"d1": env("d1"), "b1": b"{bad"})
    assert purge(r, k, 100, 0, 1, 0, 0) == 1  # scheduled only
    assert r.llen(k.ready) == 1 and r.hexists(k.jobs, "d1") and r.hexists(k.jobs, "b1")
    assert purge(r, k, 100, 0, 0, 1, 1) == 2  # dead and broken
    assert not r.exists(k.dead) and not r.exists(k.poison) and not r.exists(k.broken)
    assert sorted(r.hkeys(k.jobs)) == [b"r1"]


@pytest.mark.parametrize(
    "argv",
    [
        (0, 1, 1, 0, 0),  # limit below 1
        (5001, 1, 1, 0, 0),  # limit beyond Lua's unpack bound
        ("x", 1, 1, 0, 0),
        (10, 2, 1, 0, 0),  # a flag not 0/1
        (10, 1, -1, 0, 0),
        (10, 1, 1, 0, "yes"),
    ],
)
def test_purge_refuses_bad_argv_and_writes_nothing(
    r: redis.Redis, k: QueueKeys, namespace: str, argv: tuple[object, ...]
) -> None:
    enqueue(r, k, ["r1"])
    before = {key: r.dump(key) for key in namespace_keys(r, namespace)}
    with pytest.raises(redis.ResponseError, match="purge: "):
        r.evalsha(PURGE.script.sha, len(PURGE.keys), *PURGE.keys_for(k), *argv)  # type: ignore[no-untyped-call]
    assert {key: r.dump(key) for key in namespace_keys(r, namespace)} == before
