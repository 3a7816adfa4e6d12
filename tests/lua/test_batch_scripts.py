"""A batch's counts, kept by the scripts that end its jobs (``lua/lib/batches.lua``),
and the batch scripts themselves, on a real server: each way a job ends counts once."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import redis

from fastq.protocol import records, scripts
from fastq.protocol.batches import Share
from fastq.protocol.contracts import (
    ACK,
    ACK_TAKEN,
    BATCH_CLOSE,
    BATCH_JOIN,
    BATCH_OPEN,
    BATCH_SEAL,
    BATCH_SETTLE,
    CLAIM,
    ENQUEUE,
    PURGE,
    RELEASE,
    ReleaseMode,
    ReviveSection,
    enqueue_extras,
)
from fastq.protocol.keys import BatchKeys, QueueKeys
from fastq.protocol.outcomes import Outcomes
from fastq.protocol.revive import revive_ids
from tests.lua.test_cancel_tags_unique_scripts import cancel

NOW_MS = int(time.time() * 1000)
B = "b1"
W = "w1"


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


@pytest.fixture
def bk(namespace: str) -> BatchKeys:
    return BatchKeys(namespace, B)


def env(attempts: int = 0) -> bytes:
    if attempts:
        return orjson.dumps(["j", [], NOW_MS, {"attempts": attempts}])
    return orjson.dumps(["j", [], NOW_MS])


def joined(r: redis.Redis, k: QueueKeys, bk: BatchKeys) -> None:
    BATCH_OPEN.call(r, [bk.batch], BATCH_OPEN.argv(60_000, "", b"", ""))
    assert BATCH_JOIN.call(r, [bk.batch], BATCH_JOIN.argv(f"q:{k.queue}", 60_000)) == "open"
    BATCH_SEAL.call(r, BATCH_SEAL.keys_for(k), BATCH_SEAL.argv(B, "open"))


def enqueue(r: redis.Redis, k: QueueKeys, ids: list[str], batch: str = B, delay_ms: int = 0) -> int:
    argv = ENQUEUE.argv(0, delay_ms, enqueue_extras(batch=batch), ids, [env() for _ in ids])
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added


def claim(r: redis.Redis, k: QueueKeys, n: int) -> list[str]:
    reply = CLAIM.call(r, CLAIM.keys_for(k, W), CLAIM.argv(W, n, 60_000, 100))
    return [i.decode() for i in reply.ids]


def ack(r: redis.Redis, k: QueueKeys, out: Outcomes) -> Any:
    """The ack's raw reply: the count applied, or [count, batch ids ended...]."""
    return scripts.call(r, ACK.script, ACK.keys_for(k, W), out.ack_argv(10**9, 1000, W))


def share(r: redis.Redis, k: QueueKeys) -> Share:
    got = Share.parse(r.hget(k.batches, B))
    assert got is not None
    return got


def seal(r: redis.Redis, k: QueueKeys, mode: str = "seal") -> Share:
    got = Share.parse(BATCH_SEAL.call(r, BATCH_SEAL.keys_for(k), BATCH_SEAL.argv(B, mode)))
    assert got is not None
    return got


def test_enqueue_counts_the_jobs_it_adds_once(r: redis.Redis, k: QueueKeys, bk: BatchKeys) -> None:
    joined(r, k, bk)
    assert enqueue(r, k, ["a", "b", "c"]) == 3
    assert enqueue(r, k, ["a", "d"]) == 1  # 'a' exists: left alone, not counted
    assert share(r, k) == Share(4, 0, 0, 0, 0, "")
    assert r.hgetall(k.batched) == {i: B.encode() for i in (b"a", b"b", b"c", b"d")}


def test_enqueue_into_a_batch_not_joined_or_sealed_is_refused_and_writes_nothing(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    with pytest.raises(redis.ResponseError, match="was not joined on this queue"):
        enqueue(r, k, ["a"])
    joined(r, k, bk)
    seal(r, k)
    with pytest.raises(redis.ResponseError, match='batch "b1" is closed'):
        enqueue(r, k, ["a"])
    seal(r, k, "cancel")
    with pytest.raises(redis.ResponseError, match='batch "b1" is cancelled'):
        enqueue(r, k, ["a"])
    with pytest.raises(redis.ResponseError, match="extras: batch must be a batch id"):
        enqueue(r, k, ["a"], batch="two words")
    assert r.exists(k.jobs, k.ready, k.batched) == 0


def test_each_way_a_job_ends_in_an_ack_counts_once(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["d1", "d2", "dead1", "dead2", "br", "rt"])
    assert sorted(claim(r, k, 10)) == ["br", "d1", "d2", "dead1", "dead2", "rt"]
    out = Outcomes(
        done=[b"d1", b"d2"],
        retry=[(b"rt", 10, env(1))],  # its first failure: failed counts it
        dead=[(b"dead1", env(1)), (b"dead2", env(3))],  # dead2 failed before: not again
        broken=[(b"br", "bad")],
        failed=3,
    )
    assert ack(r, k, out) == 6  # not sealed yet: nothing to settle
    assert share(r, k) == Share(6, 2, 3, 0, 3, "")
    assert ack(r, k, out) == 0  # sent again: nothing counts twice
    assert share(r, k) == Share(6, 2, 3, 0, 3, "")
    assert r.hkeys(k.batched) == [b"rt"]


def test_the_ack_that_ends_a_sealed_share_says_so_once(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["a", "b"])
    seal(r, k)
    claim(r, k, 2)
    assert ack(r, k, Outcomes(done=[b"a"])) == 1
    assert ack(r, k, Outcomes(done=[b"b"])) == [1, B.encode()]
    assert ACK.batches_ended([1, B.encode()]) == [B]
    assert r.smembers(k.batches_due) == {B.encode()}
    assert share(r, k) == Share(2, 2, 0, 0, 0, "c")


def test_a_poison_job_buried_by_release_counts_dead(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["p"])
    for _ in range(3):
        claim(r, k, 1)
        argv = RELEASE.argv(W, ReleaseMode.STALLED, 2, ids=["p"])
        RELEASE.call(r, RELEASE.keys_for(k, W), argv)
    assert share(r, k) == Share(1, 0, 1, 0, 1, "")


def test_cancel_counts_what_it_stopped_and_an_ack_the_held_ones(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["held1", "held2", "w1", "w2"])
    assert sorted(claim(r, k, 2)) == ["held1", "held2"]
    reply = cancel(r, k, ["held1", "held2", "w1", "w2"])
    assert (reply.stopped, reply.held) == (2, 2)
    assert share(r, k) == Share(4, 0, 0, 2, 0, "")
    # a held one completes after all (done), the other is retried: cancelled then
    ack(r, k, Outcomes(done=[b"held1"], retry=[(b"held2", 10, env(1))], failed=1))
    assert share(r, k) == Share(4, 1, 0, 3, 0, "")


def test_purge_counts_the_waiting_jobs_it_deletes_cancelled(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["a", "b"])
    enqueue(r, k, ["s"], delay_ms=60_000)
    PURGE.call(r, PURGE.keys_for(k), PURGE.argv(100, True, True, False, False))
    assert share(r, k) == Share(3, 0, 0, 3, 0, "")


def test_ack_taken_counts_at_most_once_jobs(r: redis.Redis, k: QueueKeys, bk: BatchKeys) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["t1", "t2", "t3"])
    argv = ACK_TAKEN.argv(10**9, 1000, [(1, 2)], [(b"t3", env(1))], [], [], [b"t1", b"t2"])
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, W), argv)
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, W), argv)  # resent: counted once
    assert share(r, k) == Share(3, 2, 1, 0, 1, "")


def settle(r: redis.Redis, bk: BatchKeys, *reports: tuple[str, str], fired: bool = False) -> Any:
    return BATCH_SETTLE.call(r, [bk.batch], BATCH_SETTLE.argv(60_000, fired, list(reports)))


def test_a_batch_ends_once_closed_and_every_member_told_it_ended(
    r: redis.Redis, bk: BatchKeys
) -> None:
    cb = orjson.dumps({"complete": {"name": "report", "queue": "q", "p": 0}})
    assert BATCH_OPEN.call(r, [bk.batch], BATCH_OPEN.argv(60_000, "d", cb, "")) == (True, "open")
    for member in ("q:a", "q:b", "k:child"):
        assert BATCH_JOIN.call(r, [bk.batch], BATCH_JOIN.argv(member, 60_000)) == "open"
    assert settle(r, bk, ("q:a", "2,2,0,0,0,c")).state == "open"
    close = BATCH_CLOSE.call(r, [bk.batch], BATCH_CLOSE.argv(False))
    assert (close.state, close.cancelled, sorted(close.members)) == (
        "closed",
        False,
        ["k:child", "q:a", "q:b"],
    )
    assert BATCH_JOIN.call(r, [bk.batch], BATCH_JOIN.argv("q:c", 60_000)) == "closed"
    assert settle(r, bk, ("q:b", "3,1,1,0,1,c")).state == "closed"  # b is not over
    assert settle(r, bk, ("q:b", "3,2,1,0,1,c"), ("q:nope", "9,9,0,0,0,c")).state == "closed"
    assert (
        settle(r, bk, ("q:b", "3,1,0,0,0,c")).state == "closed"
    )  # a late report takes nothing back
    fire = settle(r, bk, ("k:child", "4,3,0,1,0"))
    assert (fire.state, fire.counts, fire.description) == ("fire", (9, 7, 1, 1, 1), "d")
    assert orjson.loads(fire.callbacks)["complete"]["name"] == "report"
    assert settle(r, bk).state == "fire"  # until someone says the callbacks are in
    assert settle(r, bk, fired=True).state == "fired"
    assert settle(r, bk).state == "fired"
    assert settle(r, BatchKeys(bk.namespace, "none")).state == ""


def test_failed_reads_the_workers_attempts_not_an_argument_of_that_name(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["x"])
    claim(r, k, 1)
    # died after retries (attempts 3): counted failed at its first retry, not again
    dead_env = orjson.dumps(["j", [{"attempts": 1}], NOW_MS, {"attempts": 3, "error": "x"}])
    ack(r, k, Outcomes(dead=[(b"x", dead_env)], failed=1))
    assert share(r, k) == Share(1, 0, 1, 0, 0, "")


def test_two_batches_and_plain_jobs_in_one_queue_each_count_their_own(
    r: redis.Redis, k: QueueKeys, namespace: str
) -> None:
    """One batch live in a queue is counted by HDEL alone (lib/batches.lua's ' live');
    two take the lookup of each job's batch; plain jobs count in neither."""
    other = BatchKeys(namespace, "b2")
    joined(r, k, BatchKeys(namespace, B))
    for bk in (BatchKeys(namespace, B), other):
        BATCH_OPEN.call(r, [bk.batch], BATCH_OPEN.argv(60_000, "", b"", ""))
        BATCH_JOIN.call(r, [bk.batch], BATCH_JOIN.argv(f"q:{k.queue}", 60_000))
    BATCH_SEAL.call(r, BATCH_SEAL.keys_for(k), BATCH_SEAL.argv("b2", "open"))
    enqueue(r, k, ["a1", "a2"])
    assert r.hget(k.batches, " live") == b"1 b1"
    enqueue(r, k, ["c1", "c2"], batch="b2")
    assert r.hget(k.batches, " live") == b"2"
    plain = ENQUEUE.argv(0, 0, b"", ["p1"], [env()])
    ENQUEUE.call(r, ENQUEUE.keys_for(k), plain)
    claimed = claim(r, k, 10)
    assert sorted(claimed) == ["a1", "a2", "c1", "c2", "p1"]
    ack(r, k, Outcomes(done=[b"a1", b"c1", b"p1"]))
    assert share(r, k) == Share(2, 1, 0, 0, 0, "")
    assert Share.parse(r.hget(k.batches, "b2")) == Share(2, 1, 0, 0, 0, "")
    ack(r, k, Outcomes(done=[b"c2"]))  # b2's share ends: b1 is the one live left
    assert r.hget(k.batches, " live") == b"1 b1"
    ack(r, k, Outcomes(done=[b"a2"]))
    assert share(r, k) == Share(2, 2, 0, 0, 0, "")
    assert r.hget(k.batches, " live") is None
    assert r.exists(k.batched) == 0


# -- an ack grouped by batch: the worker read each job's batch in its envelope -----------


def claim_learning(r: redis.Redis, k: QueueKeys, n: int, batch_of: dict[bytes, str]) -> list[str]:
    """A claim as a worker makes it: the batch of each job claimed learned from its
    envelope (``ClaimReply.decode``), for the ack to group the done ones by."""
    reply = CLAIM.call(r, CLAIM.keys_for(k, W), CLAIM.argv(W, n, 60_000, 100))
    reply.decode({}, batch_of)
    return [i.decode() for i in reply.ids]


def ack_grouped(r: redis.Redis, k: QueueKeys, out: Outcomes, batch_of: dict[bytes, str]) -> Any:
    argv = out.ack_argv(10**9, 1000, W, 0, batch_of)
    return scripts.call(r, ACK.script, ACK.keys_for(k, W), argv)


def test_the_enqueue_writes_the_batch_into_each_envelope_whatever_its_form(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    t = str(NOW_MS).encode()
    envs = {
        "compact": b'["j",[1],' + t + b"]",
        "kwargs": b'["j",[],' + t + b',{"k":{"x":1},"retries":2}]',
        "empty": b'["j",[],' + t + b",{}]",
        "blank": b'[ "j" , [ 1 ] , ' + t + b' , { "retries" : 2 } ]\n',
        "blank_empty": b'["j",[],' + t + b",{ }] ",
        "blank_compact": b'["j",[],' + t + b" ]",
    }
    argv = ENQUEUE.argv(0, 0, enqueue_extras(batch=B), list(envs), list(envs.values()))
    assert ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added == len(envs)
    for job_id, sent in envs.items():
        stored = orjson.loads(r.hget(k.jobs, job_id))
        before = orjson.loads(sent)
        assert stored[:3] == before[:3], job_id
        assert stored[3] == {**(before[3] if len(before) == 4 else {}), "b": B}, job_id
    batch_of: dict[bytes, str] = {}
    claim_learning(r, k, 10, batch_of)
    assert batch_of == {job_id.encode(): B for job_id in envs}
    # a plain job's envelope is stored as sent
    plain = ENQUEUE.argv(0, 0, b"", ["p"], [envs["compact"]])
    ENQUEUE.call(r, ENQUEUE.keys_for(k), plain)
    assert r.hget(k.jobs, "p") == envs["compact"]


@pytest.mark.parametrize("batch", [B, ""])
def test_a_batch_field_a_producer_sends_is_refused(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys, batch: str
) -> None:
    joined(r, k, bk)
    for sent in (
        orjson.dumps(["j", [], NOW_MS, {"b": "b2"}]),
        orjson.dumps(["j", [], NOW_MS, {"k": {"x": 1}, "b": "b2"}]),
        b'[ "j", [], %d, {"b": "b2"} ]' % NOW_MS,
    ):
        argv = ENQUEUE.argv(0, 0, enqueue_extras(batch=batch or None), ["a"], [sent])
        with pytest.raises(redis.ResponseError, match="field b is written by the enqueue script"):
            ENQUEUE.call(r, ENQUEUE.keys_for(k), argv)
    assert r.exists(k.jobs, k.ready, k.batched) == 0


def test_an_ack_grouped_by_batch_counts_once_and_its_entries_go_with_the_share(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["a", "b", "c", "d"])
    seal(r, k)
    batch_of: dict[bytes, str] = {}
    assert sorted(claim_learning(r, k, 4, batch_of)) == ["a", "b", "c", "d"]
    assert ack_grouped(r, k, Outcomes(done=[b"a", b"b"]), batch_of) == 2
    assert share(r, k) == Share(4, 2, 0, 0, 0, "c")
    assert r.hlen(k.batched) == 4  # no delete per job: they go once the share ends
    # sent again (its reply lost), still grouped: the worker holds them no more
    resent = {b"a": B, b"b": B}
    assert ack_grouped(r, k, Outcomes(done=[b"a", b"b"]), resent) == 0
    assert share(r, k) == Share(4, 2, 0, 0, 0, "c")
    # in one ack: one sent again (stale), one grouped, one the worker could not tell
    # (looked up): the share ends
    del batch_of[b"d"]
    batch_of[b"b"] = B
    out = Outcomes(done=[b"b", b"c", b"d"])
    assert ack_grouped(r, k, out, batch_of) == [2, B.encode()]
    assert share(r, k) == Share(4, 4, 0, 0, 0, "c")
    assert r.exists(k.batched) == 0
    assert r.hget(k.batches, " live") is None and r.hget(k.batches, " sweep") is None


def test_a_share_that_ends_beside_another_live_one_is_swept_from_batched(
    r: redis.Redis, k: QueueKeys, namespace: str
) -> None:
    """The entries an ack grouped by batch leaves: once their share ends while another
    lives, a sweep (a step per call that counts ends) deletes them, and only them."""
    n = 1000  # past the listpack: HSCAN then takes several steps
    joined(r, k, BatchKeys(namespace, B))
    other = BatchKeys(namespace, "b2")
    BATCH_OPEN.call(r, [other.batch], BATCH_OPEN.argv(60_000, "", b"", ""))
    BATCH_JOIN.call(r, [other.batch], BATCH_JOIN.argv(f"q:{k.queue}", 60_000))
    BATCH_SEAL.call(r, BATCH_SEAL.keys_for(k), BATCH_SEAL.argv("b2", "open"))
    enqueue(r, k, [f"a{i}" for i in range(n)])
    enqueue(r, k, [f"c{i}" for i in range(n)], batch="b2")
    batch_of: dict[bytes, str] = {}
    claimed = claim_learning(r, k, 2 * n, batch_of)
    assert len(batch_of) == 2 * n
    ours = [i.encode() for i in claimed if i.startswith("a")]
    theirs = [i.encode() for i in claimed if i.startswith("c")]
    ack_grouped(r, k, Outcomes(done=ours), batch_of)  # b1's share ends: b2 lives on
    assert share(r, k) == Share(n, n, 0, 0, 0, "")
    assert r.hget(k.batches, " live") == b"1 b2"
    swept_at = None
    for step in range(0, n, 10):
        if swept_at is None and r.hget(k.batches, " sweep") is None:
            swept_at = step
        ack_grouped(r, k, Outcomes(done=theirs[step : step + 10]), batch_of)
        if step == n // 2:
            left = set(r.hvals(k.batched))
            assert left == {b"b2"} and r.hlen(k.batched) == n  # b2's, ended or not
    assert swept_at is not None and swept_at > 0  # it took steps
    assert Share.parse(r.hget(k.batches, "b2")) == Share(n, n, 0, 0, 0, "")
    assert r.exists(k.batched) == 0 and r.hkeys(k.batches) == [B.encode(), b"b2"]


def test_a_dead_job_revived_runs_outside_the_batch_that_counted_its_death(
    r: redis.Redis, k: QueueKeys, bk: BatchKeys
) -> None:
    joined(r, k, bk)
    enqueue(r, k, ["x"])
    batch_of: dict[bytes, str] = {}
    claim_learning(r, k, 1, batch_of)
    dead_env = r.hget(k.jobs, "x")[:-2] + b',"attempts":1,"error":"boom"}]'
    ack_grouped(r, k, Outcomes(dead=[(b"x", dead_env)], failed=1), batch_of)
    assert share(r, k) == Share(1, 0, 1, 0, 1, "")
    assert revive_ids(r, k, ReviveSection.DEAD, ["x"]) == 1
    assert orjson.loads(r.hget(k.jobs, "x")) == ["j", [], NOW_MS]  # its run fields and batch gone
    assert claim_learning(r, k, 1, batch_of) == ["x"] and batch_of == {}
    assert ack_grouped(r, k, Outcomes(done=[b"x"]), batch_of) == 1
    assert share(r, k) == Share(1, 0, 1, 0, 1, "")  # its death counted; this run not


def test_an_id_enqueued_again_plain_after_its_batched_run_is_in_no_batch(
    r: redis.Redis, k: QueueKeys, namespace: str
) -> None:
    """A grouped ack leaves the entry of its job while the share lives; once the
    job's record is gone its id may come back, as a plain job: its end then counts
    for no batch."""
    joined(r, k, BatchKeys(namespace, B))
    enqueue(r, k, ["x", "y"])
    batch_of: dict[bytes, str] = {}
    claim_learning(r, k, 1, batch_of)
    ack_grouped(r, k, Outcomes(done=[b"x"]), batch_of)
    assert r.hget(k.batched, "x") == B.encode()
    r.delete(k.records, k.records_old)  # its record expired
    plain = ENQUEUE.argv(0, 0, b"", ["x"], [env()])
    assert ENQUEUE.call(r, ENQUEUE.keys_for(k), plain).added == 1
    assert r.hget(k.batched, "x") is None
    assert sorted(claim(r, k, 2)) == ["x", "y"]
    ack(r, k, Outcomes(dead=[(b"x", env(1))], failed=1))  # looked up: in no batch
    assert share(r, k) == Share(2, 1, 0, 0, 0, "")


def test_one_ack_of_two_batches_and_plain_jobs_counts_each_and_keeps_their_runs(
    r: redis.Redis, k: QueueKeys, namespace: str
) -> None:
    """The worker reorders its done ids into groups: each batch counts its own, the
    plain ones none, and each record keeps its own run time."""
    joined(r, k, BatchKeys(namespace, B))
    other = BatchKeys(namespace, "b2")
    BATCH_OPEN.call(r, [other.batch], BATCH_OPEN.argv(60_000, "", b"", ""))
    BATCH_JOIN.call(r, [other.batch], BATCH_JOIN.argv(f"q:{k.queue}", 60_000))
    BATCH_SEAL.call(r, BATCH_SEAL.keys_for(k), BATCH_SEAL.argv("b2", "open"))
    enqueue(r, k, ["a1", "a2"])
    enqueue(r, k, ["c1"], batch="b2")
    ENQUEUE.call(r, ENQUEUE.keys_for(k), ENQUEUE.argv(0, 0, b"", ["p1"], [env()]))
    batch_of: dict[bytes, str] = {}
    assert len(claim_learning(r, k, 10, batch_of)) == 4
    out = Outcomes()
    for run_ms, job_id in enumerate([b"p1", b"a1", b"c1", b"a2"], start=11):
        out.note_done(job_id, run_ms, 1)
    assert ack_grouped(r, k, out, batch_of) == 4
    assert batch_of == {}
    assert share(r, k) == Share(2, 2, 0, 0, 0, "")
    assert Share.parse(r.hget(k.batches, "b2")) == Share(1, 1, 0, 0, 0, "")
    ran = {i: records.read(r, k, i) for i in ("p1", "a1", "c1", "a2")}
    assert {i: rec.run_ms for i, rec in ran.items() if rec} == {
        "p1": 11,
        "a1": 12,
        "c1": 13,
        "a2": 14,
    }
