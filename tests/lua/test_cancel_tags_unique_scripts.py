"""Tags, cancel and unique locks in the scripts, on a real server: enqueue writes the
tag index, links and locks; every end path (ack done/dead/broken, poison burial,
cancel, purge) cleans them; cancel.lua and its markers; the claim's release of
unique_until="start" locks; the reaper's sweeps."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pytest
import redis
from test_scripts import ack, claim, claimed_ids, env, release

from fastq.protocol import scripts
from fastq.protocol.cancel import cancel_call
from fastq.protocol.contracts import (
    CANCEL,
    ENQUEUE,
    PURGE,
    REAP,
    CancelReply,
    EnqueueReply,
    ReleaseMode,
    enqueue_extras,
)
from fastq.protocol.introspect import get_job
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def put(
    r: redis.Redis,
    k: QueueKeys,
    ids: list[str],
    tags: Sequence[str] = (),
    until: Optional[str] = None,
    window_ms: int = 60_000,
    ukeys: Optional[list[str]] = None,
    delay_ms: int = 0,
    priority: int = 0,
) -> EnqueueReply:
    extras = enqueue_extras(tags, until, window_ms)
    if until is not None and ukeys is None:
        ukeys = ["K"] * len(ids)
    argv = ENQUEUE.argv(priority, delay_ms, extras, ids, [env(i) for i in ids], ukeys)
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv)


def cancel(r: redis.Redis, k: QueueKeys, ids: list[str]) -> CancelReply:
    return cancel_call(r, k, "", max(len(ids), 1), ids)


def cancel_tag(r: redis.Redis, k: QueueKeys, tag: str, limit: int) -> CancelReply:
    return cancel_call(r, k, tag, limit, ())


def tagged(r: redis.Redis, k: QueueKeys) -> list[bytes]:
    return r.zrange(k.tagged, 0, -1)  # type: ignore[return-value]


# -- tags and links --------------------------------------------------------------------


def test_a_plain_batch_writes_no_tag_index_links_or_locks(r: redis.Redis, k: QueueKeys) -> None:
    assert put(r, k, ["a", "b"]) == EnqueueReply(2, {})
    for key in (k.tagged, k.links, k.unique, k.unique_exp, k.settings, k.cancelled):
        assert not r.exists(key)


def test_tags_are_indexed_per_job_and_dropped_when_each_job_ends(
    r: redis.Redis, k: QueueKeys
) -> None:
    put(r, k, ["a", "b", "c", "d"], tags=["campaign:42", "mail"])
    assert tagged(r, k) == [
        b"campaign:42\na",
        b"campaign:42\nb",
        b"campaign:42\nc",
        b"campaign:42\nd",
        b"mail\na",
        b"mail\nb",
        b"mail\nc",
        b"mail\nd",
    ]
    assert r.hget(k.links, "a") == b"\ncampaign:42\nmail"
    assert get_job(r, k, "a").tags == ["campaign:42", "mail"]  # type: ignore[union-attr]
    assert sorted(claimed_ids(claim(r, k, "w", 4))) == ["a", "b", "c", "d"]
    out = Outcomes(
        done=[b"a"],
        retry=[(b"b", 60_000, env("b"))],
        dead=[(b"c", env("c"))],
        broken=[(b"d", "bad payload")],
    )
    assert ack(r, k, "w", out) == 4
    # the retried job lives on: it keeps its tags; the three that ended lose theirs
    assert tagged(r, k) == [b"campaign:42\nb", b"mail\nb"]
    assert r.hkeys(k.links) == [b"b"]


def test_a_poison_job_buried_by_a_hand_back_loses_its_tags_and_lock(
    r: redis.Redis, k: QueueKeys
) -> None:
    put(r, k, ["p"], tags=["t"], until="end")
    for round_ in range(3):
        claim(r, k, f"w{round_}", 1)
        release(r, k, f"w{round_}", ReleaseMode.STALLED, ["p"], max_stalls=2)
    assert r.zscore(k.dead, "p") is not None
    assert tagged(r, k) == [] and not r.exists(k.links)
    assert not r.exists(k.unique) and not r.exists(k.unique_exp)


def test_purge_drops_the_tags_and_locks_of_what_it_deletes(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["a"], tags=["t"], until="window", ukeys=["ka"])
    put(r, k, ["s"], tags=["t"], until="end", ukeys=["ks"], delay_ms=60_000)
    put(r, k, ["keep"], tags=["t"])
    claim(r, k, "w", 1)  # "a" is in flight: purge never touches it
    assert PURGE.call(r, PURGE.keys_for(k), PURGE.argv(100, True, True, False, False)) == (2, 2)
    assert tagged(r, k) == [b"t\na"]
    assert r.hgetall(k.unique) == {b"ka": b"a"}  # a window lock, but its job is not purged


def test_enqueue_refuses_bad_extras_and_writes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    e = env("a")
    cases: list[tuple[list[Any], str]] = [
        ([0, 0, "{", "a", e], "extras .ARGV.3.. must be empty or a JSON object"),
        ([0, 0, '{"tags": []}', "a", e], "extras: tags must be a list of 1 to 20 tags"),
        ([0, 0, '{"tags": "x"}', "a", e], "extras: tags must be a list of 1 to 20 tags"),
        ([0, 0, '{"tags": [1]}', "a", e], "extras: tag #1 must be a string"),
        ([0, 0, '{"tags": ["a\\nb"]}', "a", e], "extras: tag #1 must be a string"),
        ([0, 0, '{"tags": ["' + "x" * 101 + '"]}', "a", e], "extras: tag #1 must be a string"),
        ([0, 0, '{"unique": "x", "unique_for_ms": 5}', "a", e, "K"], "extras: unique must be"),
        ([0, 0, '{"unique": "e", "unique_for_ms": 0}', "a", e, "K"], "extras: unique_for_ms"),
        ([0, 0, '{"unique": "e", "unique_for_ms": 1.5}', "a", e, "K"], "extras: unique_for_ms"),
        ([0, 0, '{"unique": "e", "unique_for_ms": 5}', "a", e], "ARGV must be priority"),
        ([0, 0, '{"unique": "e", "unique_for_ms": 5}', "a", e, ""], "unique key #1 must be"),
        ([0, 0, '{"unique": "e", "unique_for_ms": 5}', "a", e, "a\nb"], "unique key #1 must be"),
    ]
    for argv, message in cases:
        with pytest.raises(redis.ResponseError, match=f"fastq enqueue: {message}"):
            scripts.call(r, ENQUEUE.script, ENQUEUE.keys_for(k), argv)
    assert list(r.scan_iter(match=f"{namespace}:*")) == []


# -- cancel ----------------------------------------------------------------------------


def test_cancel_takes_ready_scheduled_and_priority_jobs_out_for_good(
    r: redis.Redis, k: QueueKeys
) -> None:
    put(r, k, ["r1", "r2"], tags=["t"])
    put(r, k, ["s1"], delay_ms=60_000, priority=3)
    put(r, k, ["p1"], priority=5)
    assert cancel(r, k, ["r1", "s1", "p1", "unknown", "r1"]) == CancelReply(3, 0, 4)
    assert r.zcard(k.scheduled) == 0 and not r.exists(k.sched_prio) and r.zcard(k.prio) == 0
    assert r.llen(k.ready) == 2  # r1 stays in the list: the claim drops it
    assert sorted(r.zrange(k.cancelled, 0, -1)) == [b"p1", b"r1", b"s1"]
    assert tagged(r, k) == [b"t\nr2"] and r.hget(k.stats, "cancelled") == b"3"
    info = get_job(r, k, "r1")
    assert info is not None and info.state == "cancelled" and info.cancelled_at is not None
    assert claimed_ids(claim(r, k, "w", 10)) == ["r2"]
    # a cancelled id stays cancelled: enqueueing it again adds nothing
    assert put(r, k, ["r1", "new"]).added == 1
    assert not r.hexists(k.jobs, "r1") and claimed_ids(claim(r, k, "w", 10)) == ["new"]
    assert cancel(r, k, ["r1"]) == CancelReply(0, 0, 1)  # once is enough


def test_dead_and_broken_jobs_are_not_cancelled(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["d", "b"])
    claim(r, k, "w", 2)
    ack(r, k, "w", Outcomes(dead=[(b"d", env("d"))], broken=[(b"b", "bad")]))
    assert cancel(r, k, ["d", "b"]) == CancelReply(0, 0, 2)
    assert r.zscore(k.dead, "d") is not None and r.hexists(k.broken, "b")
    assert not r.exists(k.cancelled)


def test_a_job_cancelled_while_it_runs_is_not_brought_back(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["retry", "dead", "broken", "stall", "done"])
    assert len(claim(r, k, "w", 5)) == 5
    r.hset(k.stalls, "retry", 1)
    # all five held by a worker: reported apart, not counted cancelled yet
    assert cancel(r, k, ["retry", "dead", "broken", "stall", "done"]) == CancelReply(0, 5, 5)
    assert r.hget(k.stats, "cancelled") is None
    out = Outcomes(
        done=[b"done"],
        retry=[(b"retry", 0, env("retry"))],
        dead=[(b"dead", env("dead"))],
        broken=[(b"broken", "bad")],
    )
    assert ack(r, k, "w", out) == 4  # applied: they leave the worker's hold
    assert release(r, k, "w", ReleaseMode.STALLED, ["stall"]) == 1
    for key in (k.jobs, k.scheduled, k.sched_prio, k.dead, k.broken, k.stalls, k.ready):
        assert not r.exists(key), key
    stats = r.hgetall(k.stats)
    assert stats[b"cancelled"] == b"4" and b"retried" not in stats and b"dead" not in stats
    # counted cancelled as their end was dropped; the one that completed never was
    assert stats[b"processed"] == b"1" and r.zscore(k.cancelled, "done") is None
    done = get_job(r, k, "done")
    assert done is not None and (done.state, done.worker) == ("done", "w")
    # the others were stopped when their run ended: recorded cancelled
    for job_id in ("retry", "dead", "broken", "stall"):
        info = get_job(r, k, job_id)
        assert info is not None and info.state == "cancelled", job_id
    assert r.zcard(k.cancelled) == 4 and r.scard(k.held("w")) == 1  # the sentinel only


def test_cancel_by_tag_takes_at_most_limit_entries_per_call(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, [f"j{i}" for i in range(7)], tags=["blast", "other"])
    put(r, k, ["x"], tags=["blastoff"])  # a tag that starts like it is another tag
    claim(r, k, "w", 1)  # j0... in flight: cancelled too (its envelope goes)
    assert cancel_tag(r, k, "blast", 3) == CancelReply(2, 1, 3)  # j0 is held
    assert cancel_tag(r, k, "blast", 3) == CancelReply(3, 0, 3)
    assert cancel_tag(r, k, "blast", 3) == CancelReply(1, 0, 1)
    assert cancel_tag(r, k, "blast", 3) == CancelReply(0, 0, 0)
    assert tagged(r, k) == [b"blastoff\nx"]  # "other" went with the cancelled jobs
    assert r.zcard(k.cancelled) == 7 and r.hkeys(k.jobs) == [b"x"]


def test_cancel_refuses_bad_calls(r: redis.Redis, k: QueueKeys) -> None:
    ks = CANCEL.keys_for(k)
    for argv, message in [
        (["", 1001, 0, "a"], "limit .ARGV.2.. must be <= 1000"),
        (["", 0, 0], "limit .ARGV.2.. must be an integer >= 1"),
        (["", 1, 0, "a", "b"], "2 ids, more than limit"),
        (["t", 5, 0, "a"], "give a tag or ids, not both"),
        (["", 5, 1, "w", "a"], "1 workers need as many held sets"),
    ]:
        with pytest.raises(redis.ResponseError, match=f"cancel: {message}"):
            scripts.call(r, CANCEL.script, ks, argv)


def test_the_reaper_trims_cancel_markers_by_age(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["a", "b"])
    cancel(r, k, ["a", "b"])
    r.zadd(k.cancelled, {"a": 1})  # cancelled long ago
    REAP.call(r, REAP.keys_for(k), REAP.argv(1000, 60_000, 1000))
    assert r.zrange(k.cancelled, 0, -1) == [b"b"]


# -- unique locks ----------------------------------------------------------------------


def test_a_held_lock_refuses_the_same_key_and_names_its_holder(
    r: redis.Redis, k: QueueKeys
) -> None:
    assert put(r, k, ["a", "b", "c"], until="end", ukeys=["K", "K", "L"]) == EnqueueReply(
        2, {1: "a"}
    )
    assert put(r, k, ["d"], until="end", ukeys=["K"]) == EnqueueReply(0, {0: "a"})
    assert r.hgetall(k.unique) == {b"K": b"a", b"L": b"c"}
    assert r.hget(k.links, "a") == b"eK"
    assert sorted(r.hkeys(k.jobs)) == [b"a", b"c"]
    # the holder ends: the key is free again
    claim(r, k, "w", 1)
    ack(r, k, "w", Outcomes(done=[b"a"]))
    assert r.hgetall(k.unique) == {b"L": b"c"} and r.zrange(k.unique_exp, 0, -1) == [b"L"]
    assert put(r, k, ["e"], until="end", ukeys=["K"]) == EnqueueReply(1, {})


def test_a_lock_ends_with_its_window_and_the_reaper_sweeps_it(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["a"], until="window", ukeys=["K"])
    r.zadd(k.unique_exp, {"K": 1})  # its window ended long ago
    assert put(r, k, ["b"], until="window", ukeys=["K"]) == EnqueueReply(1, {})
    assert r.hget(k.unique, "K") == b"b"
    # the first job's end must not release the lock its successor holds
    claimed = claimed_ids(claim(r, k, "w", 2))
    assert claimed == ["a", "b"]
    put(r, k, ["c"], until="end", ukeys=["C"])
    r.zadd(k.unique_exp, {"C": 1})
    REAP.call(r, REAP.keys_for(k), REAP.argv(1000, 10**9, 1000))
    assert r.hgetall(k.unique) == {b"K": b"b"} and r.zrange(k.unique_exp, 0, -1) == [b"K"]


def test_a_window_lock_outlives_its_job_and_a_cancel(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["a", "b"], until="window", ukeys=["A", "B"])
    claim(r, k, "w", 1)
    ack(r, k, "w", Outcomes(done=[b"a"]))
    cancel(r, k, ["b"])
    assert r.hgetall(k.unique) == {b"A": b"a", b"B": b"b"} and not r.exists(k.links)
    assert put(r, k, ["c"], until="window", ukeys=["A"]) == EnqueueReply(0, {0: "a"})


def test_start_locks_are_released_by_the_claim_and_end_locks_are_not(
    r: redis.Redis, k: QueueKeys
) -> None:
    put(r, k, ["s"], until="start", ukeys=["S"])
    put(r, k, ["e"], until="end", ukeys=["E"])
    assert r.hget(k.settings, "ustart") == b"1"
    assert put(r, k, ["s2"], until="start", ukeys=["S"]) == EnqueueReply(0, {0: "s"})
    assert claimed_ids(claim(r, k, "w", 1)) == ["s"]
    assert r.hgetall(k.unique) == {b"E": b"e"}
    # one copy may now wait while the first one runs
    assert put(r, k, ["s2"], until="start", ukeys=["S"]) == EnqueueReply(1, {})
    assert put(r, k, ["s3"], until="start", ukeys=["S"]) == EnqueueReply(0, {0: "s2"})
    # the first one's end does not touch the lock its successor holds
    ack(r, k, "w", Outcomes(done=[b"s"]))
    assert r.hget(k.unique, "S") == b"s2"
    assert claimed_ids(claim(r, k, "w", 1)) == ["e"]
    assert r.hget(k.unique, "E") == b"e"


def test_cancel_releases_an_end_lock_and_a_waiting_start_lock(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, ["e"], until="end", ukeys=["E"], tags=["t"])
    put(r, k, ["s"], until="start", ukeys=["S"], delay_ms=60_000)
    assert r.hget(k.links, "e") == b"eE\nt"
    assert cancel(r, k, ["e", "s"]).stopped == 2
    assert not r.exists(k.unique) and not r.exists(k.unique_exp) and not r.exists(k.links)
    assert put(r, k, ["e2"], until="end", ukeys=["E"]).added == 1
