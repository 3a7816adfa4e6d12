"""Each Lua script on a real server: the contracts the worker and reaper build on."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import redis

from fastq.protocol.contracts import (
    ACK,
    CLAIM,
    ENQUEUE,
    EXTEND,
    REAP,
    RELEASE,
    ClaimReply,
    ReapReply,
    ReleaseMode,
    ReleaseReply,
)
from fastq.protocol.introspect import get_job
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from tests.support.keys import namespace_keys

NOW_MS = int(time.time() * 1000)


def env(job_id: str, priority: int = 0) -> bytes:
    """An envelope as fastq writes it (``p`` only when not 0); the id is not in it."""
    return orjson.dumps(["j", [], NOW_MS, {"p": priority}] if priority else ["j", [], NOW_MS])


def enqueue(
    r: redis.Redis, k: QueueKeys, ids: list[str], priority: int = 0, delay_ms: int = 0
) -> int:
    argv = ENQUEUE.argv(priority, delay_ms, b"", ids, [env(i, priority) for i in ids])
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added


def claim(r: redis.Redis, k: QueueKeys, worker: str, n: int, lease_ms: int = 60_000) -> ClaimReply:
    return CLAIM.call(r, CLAIM.keys_for(k, worker), CLAIM.argv(worker, n, lease_ms, 100))


def claimed_ids(reply: ClaimReply) -> list[str]:
    return [i.decode() for i in reply.ids]


def ack(
    r: redis.Redis,
    k: QueueKeys,
    worker: str,
    out: Outcomes,
    max_age_ms: int = 10**9,
    max_len: int = 1000,
) -> int:
    return ACK.call(r, ACK.keys_for(k, worker), out.ack_argv(max_age_ms, max_len, worker))


def release_reply(
    r: redis.Redis,
    k: QueueKeys,
    worker: str,
    mode: ReleaseMode,
    ids: list[str],
    max_stalls: int = 2,
) -> ReleaseReply:
    argv = RELEASE.argv(worker, mode, max_stalls, ids=ids)
    return RELEASE.call(r, RELEASE.keys_for(k, worker), argv)


def release(
    r: redis.Redis,
    k: QueueKeys,
    worker: str,
    mode: ReleaseMode,
    ids: list[str],
    max_stalls: int = 2,
) -> int:
    return release_reply(r, k, worker, mode, ids, max_stalls).moved


def reap(r: redis.Redis, k: QueueKeys) -> ReapReply:
    return REAP.call(r, REAP.keys_for(k), REAP.argv(1000, 10**9, 1000))


def extend(r: redis.Redis, k: QueueKeys, worker: str, lease_ms: int) -> int:
    return EXTEND.call(r, EXTEND.keys_for(k, worker), EXTEND.argv(worker, lease_ms))


def take_back_expired(r: redis.Redis, k: QueueKeys, max_stalls: int = 2) -> int:
    """What a reaper's sweep does with the lapsed leases: jobs moved."""
    workers = reap(r, k).expired_workers
    return sum(release(r, k, w, ReleaseMode.EXPIRED, [], max_stalls) for w in workers)


def take_back_from_a_lapsed_worker(r: redis.Redis, k: QueueKeys) -> None:
    """Job "a" was claimed by w1, which then stopped extending its lease long ago;
    a reaper took it back."""
    enqueue(r, k, ["a"])
    claim(r, k, "w1", 1)
    r.zadd(k.leases, {"w1": 1})
    assert take_back_expired(r, k) == 1


def held(r: redis.Redis, k: QueueKeys, worker: str) -> set[bytes]:
    return r.smembers(k.held(worker)) - {SENTINEL}


SENTINEL = b"fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"


def test_claim_leases_to_the_worker(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    assert enqueue(r, k, ["a", "b", "c"]) == 3
    reply = claim(r, k, "w1", 2, lease_ms=5000)
    assert claimed_ids(reply) == ["a", "b"]  # FIFO
    assert reply.envelopes[0] == env("a")
    assert r.smembers(k.held("w1")) == {b"a", b"b", SENTINEL}
    assert r.zscore(k.leases, "w1") == reply.now_ms + 5000  # one deadline for all it holds
    # the sentinel keeps the held set out of listpack encoding
    assert r.object("encoding", k.held("w1")) == b"hashtable"
    # one job left: a wake token stays for an idle sibling
    assert r.llen(k.wake) == 1


def test_a_stale_ack_changes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    take_back_from_a_lapsed_worker(r, k)
    assert claimed_ids(claim(r, k, "w2", 1)) == ["a"]
    assert ack(r, k, "w1", Outcomes(done=[b"a"])) == 0  # w1's lease was taken back
    assert r.hexists(k.jobs, "a") and held(r, k, "w2") == {b"a"}
    assert r.hget(k.stats, "stale_acks") == b"1"
    assert ack(r, k, "w2", Outcomes(done=[b"a"])) == 1
    assert not r.hexists(k.jobs, "a") and held(r, k, "w2") == set()


def test_an_ack_sent_again_counts_its_failures_once(r: redis.Redis, namespace: str) -> None:
    """A worker whose reply was lost sends its ack again: the failures it carries were
    counted by the first, and the second (every record stale) counts none."""
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    assert claimed_ids(claim(r, k, "w1", 2)) == ["a", "b"]
    out = Outcomes(retry=[(b"a", 1000, env("a"))], dead=[(b"b", env("b"))], failed=2)
    assert ack(r, k, "w1", out) == 2
    assert ack(r, k, "w1", out) == 0
    assert r.hget(k.stats, "failed") == b"2"
    assert r.hget(k.stats, "retried") == b"1" and r.hget(k.stats, "dead") == b"1"


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
    assert release(r, k, "w1", ReleaseMode.UNSTARTED, ["b", "c"]) == 2
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
    assert release(r, k, "w1", ReleaseMode.STALLED, []) == 1  # every lease w1 holds: just "a"
    assert r.hget(k.stats, "stalled") == b"1"
    assert r.hget(k.stalls, "a") == b"1"
    assert held(r, k, "w2") == {b"b"}
    assert r.lrange(k.ready, 0, -1) == [b"a"]
    # released everything: w1 holds nothing and no longer has a lease
    assert not r.exists(k.held("w1")) and r.zscore(k.leases, "w1") is None


def test_a_job_that_keeps_stalling_goes_dead_as_poison(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["poison", "fine"])
    for round_ in range(3):
        claim(r, k, f"w{round_}", 1)
        release(r, k, f"w{round_}", ReleaseMode.STALLED, ["poison"], max_stalls=2)
    assert r.zscore(k.dead, "poison") is not None
    assert r.hget(k.jobs, "poison") == env("poison")  # the envelope is left as it is
    assert b"stalled 3 times" in r.hget(k.poison, "poison")
    info = get_job(r, k, "poison")
    assert info is not None and info.state == "dead"
    assert info.last_error is not None and "stalled 3 times" in info.last_error
    assert info.failed_at == r.zscore(k.dead, "poison") / 1000
    assert info.stalls == 3  # what buried it, though its stall count is gone
    assert r.hget(k.stats, "stalled") == b"3" and r.hget(k.stats, "dead") == b"1"
    assert claimed_ids(claim(r, k, "w9", 10)) == ["fine"]
    assert r.hlen(k.stalls) == 0
    # trimmed from the dead set: its poison record goes with it
    REAP.call(r, REAP.keys_for(k), REAP.argv(1000, 10**9, 0))
    assert not r.exists(k.poison) and not r.hexists(k.jobs, "poison")


def test_a_poison_job_says_how_its_worker_died(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["segv"])
    for round_ in range(2):
        claim(r, k, f"w{round_}", 1)
        argv = RELEASE.argv(
            f"w{round_}", ReleaseMode.STALLED, 1, "was killed by SIGSEGV", ids=["segv"]
        )
        reply = RELEASE.call(r, RELEASE.keys_for(k, f"w{round_}"), argv)
    assert reply.buried == [
        (
            "segv",
            "stalled 2 times, the last: its worker was killed by SIGSEGV while running it "
            "(poison job?)",
        )
    ]
    info = get_job(r, k, "segv")
    assert info is not None and info.state == "dead" and info.stalls == 2
    assert info.last_error == reply.buried[0][1]


def test_release_reports_the_poison_jobs_it_buried(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["poison", "fine"])
    for round_ in range(2):
        claim(r, k, f"w{round_}", 1)
        assert release_reply(r, k, f"w{round_}", ReleaseMode.STALLED, []).buried == []
    claim(r, k, "w2", 2)
    reply = release_reply(r, k, "w2", ReleaseMode.STALLED, [], max_stalls=1)
    assert reply.moved == 2
    assert [job_id for job_id, _ in reply.buried] == ["poison"]
    assert "stalled 3 times: its worker died or hung" in reply.buried[0][1]
    assert claimed_ids(claim(r, k, "w9", 10)) == ["fine"]


def test_release_interrupted_goes_first_and_counts_no_stall(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c", "d"])
    claim(r, k, "w1", 3)
    # a hard stop while running "a": the rest of the batch unstarted, then "a" itself,
    # in the order a worker's round trip sends them
    assert release(r, k, "w1", ReleaseMode.UNSTARTED, ["b", "c"]) == 2
    for _ in range(5):  # more hard stops than max_stalls never bury it
        assert release(r, k, "w1", ReleaseMode.INTERRUPTED, ["a"], max_stalls=1) == 1
        assert claimed_ids(claim(r, k, "w1", 1)) == ["a"]  # at the very front
    assert release(r, k, "w1", ReleaseMode.INTERRUPTED, ["a"], max_stalls=1) == 1
    assert claimed_ids(claim(r, k, "w2", 10)) == ["a", "b", "c", "d"]
    assert r.hget(k.stats, "interrupted") == b"6"
    assert r.hget(k.stats, "stalled") is None and r.hlen(k.stalls) == 0
    assert r.zcard(k.dead) == 0


def test_release_refuses_an_unknown_mode_and_writes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a"])
    claim(r, k, "w1", 1)
    before = {key: r.dump(key) for key in namespace_keys(r, namespace)}
    argv = ["w1", "paused", 2, "a"]
    with pytest.raises(redis.ResponseError, match="unknown mode"):
        RELEASE.call(r, RELEASE.keys_for(k, "w1"), argv)
    assert {key: r.dump(key) for key in namespace_keys(r, namespace)} == before


def test_release_orphaned_counts_but_does_not_stall(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    claim(r, k, "w1", 2)
    assert release(r, k, "w1", ReleaseMode.ORPHANED, []) == 2
    assert r.hget(k.stats, "orphaned") == b"2" and r.hlen(k.stalls) == 0
    # all of a worker's leases come back (in no set order: they come from a set)
    assert sorted(claimed_ids(claim(r, k, "w2", 10))) == ["a", "b"]


def test_reap_returns_expired_leases_to_the_front_once(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c", "d"])
    claim(r, k, "w1", 2, lease_ms=1)
    claim(r, k, "w2", 1, lease_ms=60_000)
    time.sleep(0.01)
    reaped = reap(r, k)
    assert (reaped.promoted, reaped.next_due_ms, reaped.expired_workers) == (0, -1, ["w1"])
    assert reaped.next_deadline_ms == r.zscore(k.leases, "w2")  # the reaper sleeps until then
    assert release(r, k, "w1", ReleaseMode.EXPIRED, []) == 2
    assert release(r, k, "w1", ReleaseMode.EXPIRED, []) == 0  # a second reaper finds nothing to do
    assert reap(r, k).expired_workers == []
    assert r.zscore(k.leases, "w1") is None and not r.exists(k.held("w1"))
    # back at the front, before "d" (in no set order: they come from a set)
    again = claimed_ids(claim(r, k, "w3", 10))
    assert sorted(again[:2]) == ["a", "b"] and again[2:] == ["d"]
    # the late ack of the dead worker's lease changes nothing
    assert ack(r, k, "w1", Outcomes(done=[b"a"])) == 0
    assert r.hget(k.stats, "stalled") == b"2" and r.hget(k.stalls, "a") == b"1"
    assert held(r, k, "w2") == {b"c"}  # a live lease is not touched


def test_an_expired_release_leaves_a_lease_extended_meanwhile(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a"])
    claim(r, k, "w1", 1, lease_ms=1)
    time.sleep(0.01)
    assert reap(r, k).expired_workers == ["w1"]
    # the worker's heartbeat extends the lease between the sweep and the release
    assert extend(r, k, "w1", 60_000) == 1
    assert release(r, k, "w1", ReleaseMode.EXPIRED, []) == 0
    assert held(r, k, "w1") == {b"a"} and r.hget(k.stats, "stalled") is None


def test_extend_pushes_back_the_workers_lease(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    reply = claim(r, k, "w1", 2, lease_ms=1000)
    extended = extend(r, k, "w1", 60_000)
    assert extended == 2
    assert r.zscore(k.leases, "w1") >= reply.now_ms + 60_000


def test_extend_does_not_revive_a_lease_taken_back(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    take_back_from_a_lapsed_worker(r, k)
    assert extend(r, k, "w1", 60_000) == 0
    assert r.zscore(k.leases, "w1") is None and not r.exists(k.held("w1"))


def test_claim_promotes_due_jobs_keeping_their_priority(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["plain"])
    enqueue(r, k, ["later"], delay_ms=60_000)
    enqueue(r, k, ["urgent"], priority=9, delay_ms=1)
    enqueue(r, k, ["due"], delay_ms=1)
    time.sleep(0.01)
    reply = claim(r, k, "w1", 10)
    # urgent jumps ahead on its priority; a due delayed job joins the back of ready like
    # a fresh one (due retries go to the front: tests/lua/test_promote.py)
    assert claimed_ids(reply) == ["urgent", "plain", "due"]
    # the next due time, to sleep until (the score's fraction is its slot of the ms)
    assert reply.next_due_ms == int(r.zscore(k.scheduled, "later"))


def test_claim_drops_a_cancelled_id_and_quarantines_one_without_payload(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c", "d"])
    # "a" was cancelled: its envelope is gone and a cancel marker says so (the cancel
    # counted it); "c" lost its envelope otherwise (a producer that crashed mid-write)
    r.hdel(k.jobs, "a", "c")
    r.zadd(k.cancelled, {"a": 1_700_000_000_000})
    r.hset(k.stats, "cancelled", 1)
    assert claimed_ids(claim(r, k, "w1", 10)) == ["b", "d"]
    assert held(r, k, "w1") == {b"b", b"d"}
    assert r.hgetall(k.broken) == {b"c": b"no payload"}
    stats = r.hgetall(k.stats)
    assert (stats[b"broken"], stats[b"cancelled"]) == (b"1", b"1")
    assert not r.exists(k.ready)
    info = get_job(r, k, "c")
    assert info is not None
    assert (info.state, info.broken_reason, info.name, info.raw) == (
        "broken",
        "no payload",
        None,
        b"",
    )
    cancelled = get_job(r, k, "a")  # its marker says what became of it
    assert cancelled is not None and cancelled.state == "cancelled"


def test_a_claim_of_ids_with_envelopes_touches_neither_broken_nor_cancelled(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"])
    r.zadd(k.cancelled, {"a": 1})  # a marker alone does not drop a job that has an envelope
    assert claimed_ids(claim(r, k, "w1", 10)) == ["a", "b"]
    assert not r.exists(k.broken) and r.hget(k.stats, "broken") is None


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


@pytest.mark.parametrize(
    ("contract", "argv", "message"),
    [
        (CLAIM, ["w1", "x", 60_000, 100, 0], "n"),
        (CLAIM, ["w1", 2, 0, 100, 0], "lease_ms"),
        (CLAIM, ["", 2, 60_000, 100, 0], "worker_id"),
        (CLAIM, ["w1", 2, 60_000, 100], "epoch"),
        (CLAIM, ["w1", 2, 60_000, 100, -1], "epoch"),
        (EXTEND, ["w1", "soon", 0], "lease_ms"),
        (EXTEND, ["w1", 60_000, "x"], "epoch"),
        (REAP, [0, 10**9, 1000], "limit"),
        (RELEASE, ["w1", "stalled", -1, "a"], "max_stalls"),
        (ACK, [10**9, 1000, 0, "w1", 0, "", 1, "a", 0, 0], "section 4"),  # a section missing
        (ACK, [10**9, 1000, 0, "w1", 0, "", 9, "a", 0, 0, 0], "section 1"),  # count too large
        (ACK, [10**9, 1000, 0, "w1", 0, "", 1, "a", 0, 0, 0, "runs", "x"], "sections hold"),
        (ACK, [10**9, 1000, 0, "w1", 0, "", 1, "a", 1, "b", "later", "env", 0, 0], "delay_ms"),
        (ACK, [10**9, 1000, 0, "w1", "new", "", 1, "a", 0, 0, 0], "epoch"),
        # the batches of the done jobs: more than are done, or not "n batch" pairs
        (ACK, [10**9, 1000, 0, "w1", 0, "2 b1", 1, "a", 0, 0, 0], "more than the 1 done"),
        (ACK, [10**9, 1000, 0, "w1", 0, "b1 1", 1, "a", 0, 0, 0], "must be groups"),
    ],
)
def test_bad_argv_is_refused_before_any_write(
    r: redis.Redis, namespace: str, contract: Any, argv: list[Any], message: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c"])
    claim(r, k, "w1", 2)
    before = {key: r.dump(key) for key in namespace_keys(r, namespace)}
    with pytest.raises(redis.ResponseError, match=message):
        contract.call(r, contract.keys_for(k, "w1"), argv)
    assert {key: r.dump(key) for key in namespace_keys(r, namespace)} == before
