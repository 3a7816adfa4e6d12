"""Groups on a real server: a grouped queue is claimed round-robin across its groups
(the jobs of no group one group of their own), priorities order each group, a
job handed back returns to the front of its group, delayed and retried grouped
jobs come back into their group, and the enqueue script refuses a bad group."""

from __future__ import annotations

import time
from typing import Optional

import orjson
import pytest
import redis

from fastq.protocol.contracts import (
    ACK,
    CLAIM,
    ENQUEUE,
    PURGE,
    RELEASE,
    ClaimReply,
    ReleaseMode,
    ReviveSection,
)
from fastq.protocol.introspect import queue_stats
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from fastq.protocol.revive import revive_ids


def env(group: Optional[str], priority: int = 0) -> bytes:
    fields: dict[str, object] = {}
    if priority:
        fields["p"] = priority
    if group is not None:
        fields["g"] = group
    t = int(time.time() * 1000)
    return orjson.dumps(["j", [], t, fields] if fields else ["j", [], t])


def enqueue(
    r: redis.Redis,
    k: QueueKeys,
    ids: list[str],
    group: Optional[str],
    priority: int = 0,
    due: object = 0,
) -> int:
    envs = [env(group, priority) for _ in ids]
    argv = ENQUEUE.argv(priority, due, b"", ids, envs)  # type: ignore[arg-type]
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added


def claim(r: redis.Redis, k: QueueKeys, n: int, worker: str = "w1") -> ClaimReply:
    return CLAIM.call(r, CLAIM.keys_for(k, worker), CLAIM.argv(worker, n, 60_000, 1000))


def claim_ids(r: redis.Redis, k: QueueKeys, n: int, worker: str = "w1") -> list[str]:
    return [i.decode() for i in claim(r, k, n, worker).ids]


def drain(r: redis.Redis, k: QueueKeys, n: int) -> list[str]:
    out: list[str] = []
    while True:
        got = claim_ids(r, k, n)
        if not got:
            return out
        out += got


def test_claims_interleave_the_groups_one_job_each_in_turn(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, [f"a{i}" for i in range(6)], "A")
    enqueue(r, k, [f"b{i}" for i in range(3)], "B")
    enqueue(r, k, ["c0"], "C")
    # claims of 4: the ring goes on where the last claim stopped
    assert claim_ids(r, k, 4) == ["a0", "b0", "c0", "a1"]
    assert claim_ids(r, k, 4) == ["b1", "a2", "b2", "a3"]
    assert claim_ids(r, k, 4) == ["a4", "a5"]
    assert claim_ids(r, k, 4) == []
    # every group emptied has left the ring; the jobs of no group keep their place
    assert r.lrange(k.group_ring, 0, -1) == [b""]
    assert r.zcard(k.group_ready) == 0


def test_jobs_of_no_group_are_one_group_of_their_own(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, [f"p{i}" for i in range(3)], None)
    enqueue(r, k, [f"a{i}" for i in range(3)], "A")
    enqueue(r, k, [f"x{i}" for i in range(2)], None)
    # the plain jobs (FIFO among them) take one turn of the ring like a group
    assert drain(r, k, 3) == ["p0", "a0", "p1", "a1", "p2", "a2", "x0", "x1"]


def test_a_small_group_enqueued_after_big_ones_waits_one_turn_of_each(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    for group, size in (("A", 30_000), ("B", 300), ("C", 30)):
        ids = [f"{group}{i}" for i in range(size)]
        for lo in range(0, size, 1000):
            assert enqueue(r, k, ids[lo : lo + 1000], group) == len(ids[lo : lo + 1000])
    order = drain(r, k, 100)
    assert len(order) == 30_330 and len(set(order)) == 30_330
    # round-robin: A, B, C, A, B, C... while C lasts, then A, B while B lasts
    assert order[:90] == [f"{g}{i}" for i in range(30) for g in "ABC"]
    assert order[90:600] == [f"{g}{i}" for i in range(30, 285) for g in "AB"]
    assert order.index("C29") == 89
    assert order.index("B299") == 90 + 2 * (299 - 30) + 1
    # each group's jobs in the order enqueued
    for group, size in (("A", 30_000), ("B", 300), ("C", 30)):
        assert [j for j in order if j[0] == group] == [f"{group}{i}" for i in range(size)]


def test_more_groups_than_a_batch_take_turns_across_claims(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    for g in range(10):
        enqueue(r, k, [f"g{g}-{i}" for i in range(2)], f"g{g}")
    assert claim_ids(r, k, 4) == ["g0-0", "g1-0", "g2-0", "g3-0"]
    assert claim_ids(r, k, 4) == ["g4-0", "g5-0", "g6-0", "g7-0"]
    # the ring's '' (no job of no group) costs no turn
    assert claim_ids(r, k, 4) == ["g8-0", "g9-0", "g0-1", "g1-1"]


def test_priorities_order_the_jobs_within_a_group(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a-low"], "A", priority=-3)
    enqueue(r, k, ["a-plain1", "a-plain2"], "A")
    enqueue(r, k, ["a-high"], "A", priority=5)
    enqueue(r, k, ["b1", "b2"], "B", priority=9)
    assert drain(r, k, 10) == ["a-high", "b1", "a-plain1", "b2", "a-plain2", "a-low"]


@pytest.mark.parametrize("mode", [ReleaseMode.UNSTARTED, ReleaseMode.STALLED])
def test_a_grouped_job_handed_back_returns_to_the_front_of_its_group(
    r: redis.Redis, namespace: str, mode: ReleaseMode
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a0", "a1", "a2"], "A")
    enqueue(r, k, ["b0", "b1"], "B")
    assert claim_ids(r, k, 2) == ["a0", "b0"]
    reply = RELEASE.call(r, RELEASE.keys_for(k, "w1"), RELEASE.argv("w1", mode, 5))
    assert reply.moved == 2
    # at the front of their own groups, not in the list of the jobs of no group
    assert r.llen(k.ready) == 0
    assert drain(r, k, 10) == ["a0", "b0", "a1", "b1", "a2"]
    assert r.hget(k.stats, "stalled") == (b"2" if mode is ReleaseMode.STALLED else None)


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_delayed_grouped_job_joins_its_group_when_due(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["late"], "B", priority=2, due=300)
    enqueue(r, k, ["a0", "a1", "a2"], "A")
    assert r.hget(k.sched_prio, "late") == b"g2\nB"
    assert claim_ids(r, k, 1) == ["a0"]
    due = r.zscore(k.scheduled, "late")
    assert due is not None
    deadline = time.monotonic() + 30
    while redis_ms(r) <= due and time.monotonic() < deadline:
        time.sleep(0.02)
    # a claim promotes it to the back of group B, whose turn comes after A's
    assert claim_ids(r, k, 3) == ["a1", "late", "a2"]
    assert r.hlen(k.sched_prio) == 0


def test_a_retried_grouped_job_returns_to_the_front_of_its_group(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a0", "a1"], "A", priority=1)
    enqueue(r, k, ["b0", "b1"], "B")
    assert claim_ids(r, k, 1) == ["a0"]
    out = Outcomes(retry=[(b"a0", 20, env("A", 1))], failed=1)
    ACK.call(r, ACK.keys_for(k, "w1"), out.ack_argv(60_000, 100))
    due = r.zscore(k.scheduled, "a0")
    assert due is not None
    deadline = time.monotonic() + 30
    while redis_ms(r) <= due and time.monotonic() < deadline:
        time.sleep(0.02)
    # B's turn first (A had the last), then A's front: the retry, before a1
    assert drain(r, k, 10) == ["b0", "a0", "b1", "a1"]
    assert r.llen(k.ready) == 0


def test_a_revived_grouped_job_joins_the_back_of_its_group(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a0", "a1"], "A", priority=2)
    assert claim_ids(r, k, 1) == ["a0"]
    enqueue(r, k, ["p0"], None)
    r.hset(k.jobs, "a0", env("A", 2)[:-2] + b',"attempts":5,"error":"boom"}]')
    r.zadd(k.dead, {"a0": 1})  # as the ack that buried it left it
    r.srem(k.held("w1"), "a0")
    assert revive_ids(r, k, ReviveSection.DEAD, ["a0"]) == 1
    assert r.llen(k.ready) == 1 and r.zcard(k.prio) == 0
    assert drain(r, k, 10) == ["p0", "a1", "a0"]


def test_stats_count_grouped_jobs_and_purge_takes_them_and_their_groups(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, [f"a{i}" for i in range(5)], "A")
    enqueue(r, k, ["b0"], "B")
    enqueue(r, k, ["p0"], None)
    assert queue_stats(r, k)["ready"] == 7
    # a purge takes the plain jobs, then the grouped ones group by group
    purge = PURGE.argv(4, True, False, False, False)
    assert PURGE.call(r, PURGE.keys_for(k), purge) == (4, 4)
    assert queue_stats(r, k)["ready"] == 3
    assert r.lrange(k.group_ring, 0, -1) == [b"", b"A", b"B"]
    purge = PURGE.argv(2, True, False, False, False)
    assert PURGE.call(r, PURGE.keys_for(k), purge) == (2, 2)
    # A purged empty has left the ring: enqueued again, it joins it once
    assert r.lrange(k.group_ring, 0, -1) == [b"", b"B"]
    enqueue(r, k, ["a9"], "A")
    assert r.lrange(k.group_ring, 0, -1) == [b"", b"B", b"A"]
    assert drain(r, k, 10) == ["b0", "a9"]
    assert r.hlen(k.jobs) == 2 and queue_stats(r, k)["ready"] == 0


@pytest.mark.parametrize(
    "group, error",
    [
        ("", "must be a group: 1 to 100 characters"),
        ("x" * 101, "must be a group: 1 to 100 characters"),
        ("a\nb", "must be a group: 1 to 100 characters"),
        (7, "must be a group: 1 to 100 characters"),
    ],
)
def test_the_enqueue_script_refuses_a_bad_group_and_writes_nothing(
    r: redis.Redis, namespace: str, group: object, error: str
) -> None:
    k = QueueKeys(namespace, "q")
    bad = orjson.dumps(["j", [], int(time.time() * 1000), {"g": group}])
    argv = ENQUEUE.argv(0, 0, b"", ["ok", "bad"], [env("A"), bad])
    with pytest.raises(redis.ResponseError, match=f"envelope #2: field g {error}"):
        ENQUEUE.call(r, ENQUEUE.keys_for(k), argv)
    assert r.exists(k.jobs, k.group_ready, k.group_ring, k.settings) == 0


def test_a_group_needs_the_groups_keys(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    argv = ENQUEUE.argv(0, 0, b"", ["a"], [env("A")])
    with pytest.raises(redis.ResponseError, match="field g needs the 20 keys"):
        ENQUEUE.call(r, ENQUEUE.keys_for(k)[:18], argv)
    assert r.exists(k.jobs) == 0


def test_a_queue_without_groups_writes_no_group_key(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["p0", "p1"], None)
    enqueue(r, k, ["p2"], None, priority=3)
    assert claim_ids(r, k, 5) == ["p2", "p0", "p1"]
    assert r.exists(k.group_ready, k.group_ring) == 0
    assert r.hget(k.settings, "groups") is None
