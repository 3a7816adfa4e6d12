"""take.lua and ack_taken.lua: at-most-once jobs leave the queue before they run,
and nothing brings them back."""

from __future__ import annotations

import orjson
import pytest
import redis
from test_scripts import claim, claimed_ids, enqueue, held, reap, release

from fastq.protocol.contracts import ACK_TAKEN, TAKE, ReleaseMode
from fastq.protocol.keys import QueueKeys


def take(r: redis.Redis, k: QueueKeys, worker: str, ids: list[str]) -> list[str]:
    taken = TAKE.call(r, TAKE.keys_for(k, worker), TAKE.argv([i.encode() for i in ids]))
    return [i.decode() for i in taken]


def ack_taken(
    r: redis.Redis, k: QueueKeys, done: object = (), worker: str = "w1", **sections: object
) -> int:
    argv = ACK_TAKEN.argv(10**9, 1000, done, **sections)  # type: ignore[arg-type]
    return ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, worker), argv)


def test_take_removes_only_what_the_worker_holds(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c"])
    assert claimed_ids(claim(r, k, "w1", 2)) == ["a", "b"]
    r.hset(k.stalls, "a", 1)
    # "c" is not w1's (still queued), "x" is no job at all
    assert take(r, k, "w1", ["a", "b", "c", "x"]) == ["a", "b"]
    assert held(r, k, "w1") == set()
    assert r.hkeys(k.jobs) == [b"c"] and not r.exists(k.stalls)
    assert r.lrange(k.ready, 0, -1) == [b"c"]
    assert take(r, k, "w1", ["a"]) == []  # twice: nothing more


@pytest.mark.parametrize(
    "mode",
    [ReleaseMode.STALLED, ReleaseMode.ORPHANED, ReleaseMode.INTERRUPTED, ReleaseMode.EXPIRED],
)
def test_nothing_hands_a_taken_job_back(r: redis.Redis, namespace: str, mode: ReleaseMode) -> None:
    """The master's hand-back of a dead or stopped child, a reaper's take-back of a
    lapsed lease: none moves a job that was taken."""
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    claim(r, k, "w1", 2)
    assert take(r, k, "w1", ["a"]) == ["a"]
    r.zadd(k.leases, {"w1": 1})  # the lease lapsed long ago
    if mode is ReleaseMode.EXPIRED:
        assert reap(r, k).expired_workers == ["w1"]
        moved = release(r, k, "w1", mode, [])  # a reaper: all w1 holds
    else:
        # the master: the job the dead child ran, then the rest
        moved = release(r, k, "w1", mode, ["a"]) + release(r, k, "w1", ReleaseMode.ORPHANED, [])
    assert moved == 1  # "b", still held, goes back; "a" is gone for good
    assert r.lrange(k.ready, 0, -1) == [b"b"] and r.hkeys(k.jobs) == [b"b"]


def test_a_lease_taken_back_before_the_take_is_not_taken(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a"])
    claim(r, k, "w1", 1)
    r.zadd(k.leases, {"w1": 1})
    reap(r, k)
    assert release(r, k, "w1", ReleaseMode.EXPIRED, []) == 1
    assert take(r, k, "w1", ["a"]) == []  # w1 must not run it: it is queued again
    assert claimed_ids(claim(r, k, "w2", 1)) == ["a"]


def test_ack_taken_counts_buries_quarantines_and_hands_back(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    ids = ["ok1", "ok2", "bad", "odd", "left1", "left2"]
    enqueue(r, k, ids + ["next"])
    assert claimed_ids(claim(r, k, "w1", 6)) == ids
    reply_envs = {i: r.hget(k.jobs, i) for i in ids}
    assert take(r, k, "w1", ids) == ids
    dead_env = orjson.dumps({"id": "bad", "name": "j", "error": "ValueError: no"})
    back = ack_taken(
        r,
        k,
        [(1, 2)],
        dead=[(b"bad", dead_env)],
        broken=[(b"odd", "arguments do not fit j", reply_envs["odd"])],
        back=[(b"left1", reply_envs["left1"]), (b"left2", reply_envs["left2"])],
    )
    assert back == 2
    stats = r.hgetall(k.stats)
    assert (stats[b"processed"], stats[b"dead"], stats[b"broken"]) == (b"2", b"1", b"1")
    assert r.zrange(k.dead, 0, -1) == [b"bad"] and r.hget(k.jobs, "bad") == dead_env
    assert r.hgetall(k.broken) == {b"odd": b"arguments do not fit j"}
    assert r.hget(k.jobs, "odd") == reply_envs["odd"]
    # handed back to the very front, in order, with their envelopes, and a wake-up
    assert claimed_ids(claim(r, k, "w2", 3)) == ["left1", "left2", "next"]
    assert r.hget(k.jobs, "left1") == reply_envs["left1"]
    assert r.llen(k.wake) == 1


def test_a_hand_back_skips_an_id_enqueued_anew_meanwhile(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a"])
    old_env = claim(r, k, "w1", 1).envelopes[0]
    take(r, k, "w1", ["a"])
    enqueue(r, k, ["a"])  # a producer enqueues the id again: a job of its own
    new_env = r.hget(k.jobs, "a")
    assert ack_taken(r, k, back=[(b"a", old_env)]) == 0
    assert r.lrange(k.ready, 0, -1) == [b"a"] and r.hget(k.jobs, "a") == new_env


@pytest.mark.parametrize(
    "argv",
    [
        ["x", 1000, 0, 0, 0, 0],  # a bad dead_max_age_ms
        [10, 1000, 1, 5, -1, 0, 0, 0],  # a negative count of successes
        [10, 1000, 1, 0, 2, 0, 0, 0],  # a part numbered 0
        [10, 1000, 1, "x", 2, 0, 0, 0],  # a part not numbered
        [10, 1000, 1, 5, 0, 0],  # a part cut short
        [10, 1000, 0, 1, "a", 0, 0],  # a dead record cut short
        [10, 1000, 0, 0, 0, 1, "a"],  # a hand-back cut short
        [10, 1000, 0, 0, 0, 0, "extra"],  # more than the sections hold
    ],
)
def test_ack_taken_refuses_bad_argv_before_any_write(
    r: redis.Redis, namespace: str, argv: list[object]
) -> None:
    k = QueueKeys(namespace, "q")
    with pytest.raises(redis.ResponseError, match="ack_taken"):
        ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), argv)
    assert list(r.scan_iter(match=f"{namespace}:*")) == []


def test_take_refuses_no_ids(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    with pytest.raises(redis.ResponseError, match="take: no ids"):
        TAKE.call(r, TAKE.keys_for(k, "w1"), [])


def test_a_resent_ack_taken_counts_nothing_twice(r: redis.Redis, namespace: str) -> None:
    """A request whose reply was lost is sent again with what came since (its parts
    ahead): each part of successes counts once, by its number; a death or a
    quarantine counts once, as it is new in its set."""
    k = QueueKeys(namespace, "q")
    ids = ["a", "b", "c", "d"]
    enqueue(r, k, ids)
    claim(r, k, "w1", 4)
    envs = {i: r.hget(k.jobs, i) for i in ids}
    take(r, k, "w1", ids)
    dead = [(b"c", b'{"error":"no"}')]
    broken = [(b"d", "arguments do not fit j", envs["d"])]

    def counts() -> tuple[int, int, int]:
        stats = r.hgetall(k.stats)
        return tuple(int(stats.get(f, 0)) for f in (b"processed", b"dead", b"broken"))  # type: ignore[return-value]

    ack_taken(r, k, [(10, 2)], dead=dead, broken=broken)
    assert counts() == (2, 1, 1)
    ack_taken(r, k, [(10, 2)], dead=dead, broken=broken)  # the same again: nothing
    assert counts() == (2, 1, 1)
    ack_taken(r, k, [(10, 2), (11, 3)], dead=dead)  # again, with what came since
    assert counts() == (5, 1, 1)
    ack_taken(r, k, [(10, 2)])  # the first, landing late
    assert counts() == (5, 1, 1)
    # another worker's numbers are its own
    ack_taken(r, k, [(3, 1)], worker="w2")
    assert counts() == (6, 1, 1)
    assert 0 < r.pttl(k.taken_seq("w1")) <= 3_600_000
    assert int(r.get(k.taken_seq("w1")) or 0) == 11
