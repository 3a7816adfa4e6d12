"""Each Lua script on a real server: the contracts the worker and reaper build on."""

from __future__ import annotations

from typing import Any

import orjson
import redis

from fastq import scripts
from fastq.batch import Outcomes
from fastq.keys import QueueKeys


def env(job_id: str, priority: int = 0) -> bytes:
    return orjson.dumps(
        {"id": job_id, "args": [], "kwargs": {}, "name": "j", "queue": "q", "priority": priority}
    )


def enqueue(
    r: redis.Redis, k: QueueKeys, ids: list[str], priority: int = 0, delay_ms: int = 0
) -> int:
    argv: list[Any] = [priority, delay_ms]
    for i in ids:
        argv += [i, env(i, priority)]
    return int(scripts.call(r, scripts.ENQUEUE, k.enqueue_keys(), argv))


def claim(r: redis.Redis, k: QueueKeys, worker: str, n: int, lease_ms: int = 60_000) -> list[Any]:
    return list(scripts.call(r, scripts.CLAIM, k.claim_keys(worker), [worker, n, lease_ms, 100]))


def claimed_ids(reply: list[Any]) -> list[str]:
    return [reply[i].decode() for i in range(2, len(reply), 2)]


def ack(
    r: redis.Redis,
    k: QueueKeys,
    worker: str,
    out: Outcomes,
    max_age_ms: int = 10**9,
    max_len: int = 1000,
) -> int:
    return int(
        scripts.call(r, scripts.ACK, k.ack_keys(worker), out.ack_argv(worker, max_age_ms, max_len))
    )


def release(
    r: redis.Redis, k: QueueKeys, worker: str, mode: str, ids: list[str], max_stalls: int = 2
) -> int:
    argv = [worker, mode, max_stalls, *ids]
    return int(scripts.call(r, scripts.RELEASE, k.release_keys(worker), argv))


def reap(r: redis.Redis, k: QueueKeys, max_stalls: int = 2) -> list[int]:
    return list(scripts.call(r, scripts.REAP, k.reap_keys(), [max_stalls, 1000, 10**9, 1000]))


SENTINEL = b"fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"


def test_claim_leases_to_the_worker(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    assert enqueue(r, k, ["a", "b", "c"]) == 3
    reply = claim(r, k, "w1", 2, lease_ms=5000)
    assert claimed_ids(reply) == ["a", "b"]  # FIFO
    assert reply[3] == env("a")
    assert r.hgetall(k.lease) == {b"a": b"w1", b"b": b"w1", SENTINEL: b"1"}
    assert r.smembers(k.held("w1")) == {b"a", b"b", SENTINEL}
    assert r.zscore(k.inflight, "a") == reply[0] + 5000
    # the sentinels keep the batch structures out of listpack encoding
    assert r.object("encoding", k.inflight) == b"skiplist"
    assert r.object("encoding", k.lease) == b"hashtable"
    # one job left: a wake token stays for an idle sibling
    assert r.llen(k.wake) == 1


def test_a_stale_ack_changes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a"])
    claim(r, k, "w1", 1)
    r.hset(k.lease, "a", "w2")  # as if the lease expired and w2 now holds it
    assert ack(r, k, "w1", Outcomes(done=[b"a"])) == 0
    assert r.hexists(k.jobs, "a") and r.zscore(k.inflight, "a") is not None
    assert r.hget(k.stats, "stale_acks") == b"1"
    assert ack(r, k, "w2", Outcomes(done=[b"a"])) == 1
    assert not r.hexists(k.jobs, "a") and r.zcount(k.inflight, "-inf", "(inf") == 0


def test_ack_twice_is_harmless(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    claim(r, k, "w1", 2)
    out = Outcomes(done=[b"a"], retry=[(b"b", 1000, env("b"))], failed=1)
    assert ack(r, k, "w1", out) == 2
    assert ack(r, k, "w1", out) == 0  # the resend after a lost reply
    assert r.hget(k.stats, "processed") == b"1"
    assert r.hget(k.stats, "retried") == b"1"
    assert r.zcard(k.scheduled) == 1


def test_release_unstarted_keeps_order_and_counts_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c", "d"])
    claim(r, k, "w1", 3)
    assert release(r, k, "w1", "unstarted", ["b", "c"]) == 2
    assert claimed_ids(claim(r, k, "w2", 10)) == ["b", "c", "d"]
    assert r.hmget(k.stats, ["stalled", "orphaned"]) == [None, None]
    assert r.hlen(k.stalls) == 0


def test_release_stalled_counts_the_stall_and_only_moves_own_leases(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    claim(r, k, "w1", 1)
    claim(r, k, "w2", 1)
    assert release(r, k, "w1", "stalled", []) == 1  # every lease w1 holds: just "a"
    assert r.hget(k.stats, "stalled") == b"1"
    assert r.hget(k.stalls, "a") == b"1"
    assert r.hget(k.lease, "b") == b"w2"
    assert r.lrange(k.ready, 0, -1) == [b"a"]
    assert not r.exists(k.held("w1"))


def test_a_job_that_keeps_stalling_goes_dead_as_poison(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["poison", "fine"])
    for round_ in range(3):
        claim(r, k, f"w{round_}", 1)
        release(r, k, f"w{round_}", "stalled", ["poison"], max_stalls=2)
    assert r.zscore(k.dead, "poison") is not None
    dead_env = orjson.loads(r.hget(k.jobs, "poison"))
    assert dead_env["args"] == [] and "stalled 3 times" in dead_env["stall_error"]
    assert r.hget(k.stats, "stalled") == b"3" and r.hget(k.stats, "dead") == b"1"
    assert claimed_ids(claim(r, k, "w9", 10)) == ["fine"]
    assert r.hlen(k.stalls) == 0


def test_release_orphaned_counts_but_does_not_stall(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    claim(r, k, "w1", 2)
    assert release(r, k, "w1", "orphaned", []) == 2
    assert r.hget(k.stats, "orphaned") == b"2" and r.hlen(k.stalls) == 0
    # all of a worker's leases come back (in no set order: they come from a set)
    assert sorted(claimed_ids(claim(r, k, "w2", 10))) == ["a", "b"]


def test_reap_returns_expired_leases_to_the_front_once(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c"])
    claim(r, k, "w1", 2, lease_ms=1)
    import time

    time.sleep(0.01)
    expired, buried, promoted, next_deadline, next_due = reap(r, k)
    assert (expired, buried, promoted, next_deadline, next_due) == (2, 0, 0, -1, -1)
    assert reap(r, k)[0] == 0  # a second reaper finds nothing to do
    assert claimed_ids(claim(r, k, "w2", 10)) == ["a", "b", "c"]
    # the late ack of the dead worker's lease changes nothing
    assert ack(r, k, "w1", Outcomes(done=[b"a"])) == 0
    assert r.hget(k.stats, "stalled") == b"2"


def test_extend_pushes_back_only_own_leases(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    reply = claim(r, k, "w1", 2, lease_ms=1000)
    r.hset(k.lease, "b", "w2")  # b was taken back and re-leased meanwhile
    before_b = r.zscore(k.inflight, "b")
    extended = scripts.call(r, scripts.EXTEND, k.extend_keys("w1"), ["w1", 60_000])
    assert extended == 1
    assert r.zscore(k.inflight, "a") >= reply[0] + 60_000
    assert r.zscore(k.inflight, "b") == before_b


def test_claim_promotes_due_jobs_keeping_their_priority(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["plain"])
    enqueue(r, k, ["later"], delay_ms=60_000)
    enqueue(r, k, ["urgent"], priority=9, delay_ms=1)
    enqueue(r, k, ["due"], delay_ms=1)
    import time

    time.sleep(0.01)
    reply = claim(r, k, "w1", 10)
    # urgent jumps ahead on its priority; due retries go to the front of ready
    assert claimed_ids(reply) == ["urgent", "due", "plain"]
    assert reply[1] == r.zscore(k.scheduled, "later")  # next due time, to sleep until


def test_claim_skips_ids_whose_envelope_is_gone(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    r.hdel(k.jobs, "a")  # cancelled
    assert claimed_ids(claim(r, k, "w1", 10)) == ["b"]
    assert r.zcount(k.inflight, "-inf", "(inf") == 1


def test_dead_set_is_trimmed_by_size_and_age(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    ids = [f"j{i}" for i in range(8)]
    enqueue(r, k, ids)
    claim(r, k, "w1", 8)
    out = Outcomes(dead=[(i.encode(), env(i)) for i in ids[:5]], failed=5)
    ack(r, k, "w1", out, max_len=3)
    assert r.zcard(k.dead) == 3
    assert r.hlen(k.jobs) == 3 + 3  # the trimmed dead are deleted, the 3 still leased stay
    r.zadd(k.dead, {"j0-old": 1})  # died in 1970
    r.hset(k.jobs, "j0-old", env("j0-old"))
    ack(r, k, "w1", Outcomes(dead=[(b"j5", env("j5"))]), max_age_ms=3_600_000, max_len=100)
    assert r.zscore(k.dead, "j0-old") is None and not r.hexists(k.jobs, "j0-old")
    assert r.hget(k.stats, "dead") == b"6"
