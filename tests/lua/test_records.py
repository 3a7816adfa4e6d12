"""The records of jobs that ended (lib/records.lua), as the scripts that end a job
write them, trim them and read them; and stale acks counted once per job."""

from __future__ import annotations

import orjson
import pytest
import redis
from test_scripts import ack, claim, enqueue, env, reap, release

from fastq.protocol import records, scripts
from fastq.protocol.contracts import ACK, ACK_TAKEN, ENQUEUE, TAKE, ReleaseMode
from fastq.protocol.introspect import get_job
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def done(r: redis.Redis, k: QueueKeys, worker: str, ids: list[str]) -> int:
    enqueue(r, k, ids)
    assert len(claim(r, k, worker, len(ids))) == len(ids)
    return ack(r, k, worker, Outcomes(done=[i.encode() for i in ids]))


def kept(r: redis.Redis, k: QueueKeys, key: str) -> list[str]:
    """The ids with a record in one generation (``k.records`` or ``k.records_old``),
    logged ones folded first."""
    records.fold(r, k)
    return sorted(i.decode() for i in r.hkeys(key) if i and not i.startswith(b"fastq:"))


def test_a_job_done_leaves_a_record_that_keeps_its_id_from_coming_back(
    r: redis.Redis, k: QueueKeys
) -> None:
    assert done(r, k, "w1", ["a", "b"]) == 2
    rec = records.read(r, k, "a")
    assert rec is not None and (rec.outcome, rec.worker, rec.error) == ("done", "w1", None)
    now_s = int(r.time()[0])
    assert now_s - 5 <= rec.ended_at <= now_s + 1  # Redis' clock
    assert kept(r, k, k.records) == ["a", "b"]
    info = get_job(r, k, "a")
    assert info is not None and (info.state, info.worker) == ("done", "w1")
    # enqueued again (a producer's retry): nothing added while the record lasts
    assert enqueue(r, k, ["a", "c"]) == 1
    assert r.hkeys(k.jobs) == [b"c"] and r.lrange(k.ready, 0, -1) == [b"c"]


def test_a_dead_job_is_recorded_with_its_attempts_and_error(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["d"])
    claim(r, k, "w1", 1)
    died = orjson.dumps([*orjson.loads(env("d")), {"attempts": 3, "error": "ValueError: boom"}])
    ack(r, k, "w1", Outcomes(dead=[(b"d", died)]))
    rec = records.read(r, k, "d")
    assert rec is not None
    assert (rec.outcome, rec.attempts, rec.error, rec.worker) == (
        "dead",
        3,
        "ValueError: boom",
        "w1",
    )
    info = get_job(r, k, "d")  # its envelope is in the dead set; the record adds to it
    assert info is not None and (info.state, info.worker, info.attempts) == ("dead", "w1", 3)
    assert info.ended_at == rec.ended_at and info.name == "j"


def test_a_poison_job_buried_by_release_is_recorded_dead(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["p"])
    claim(r, k, "w1", 1)
    assert release(r, k, "w1", ReleaseMode.STALLED, ["p"], max_stalls=0) == 1
    rec = records.read(r, k, "p")
    assert rec is not None and rec.outcome == "dead" and rec.worker == "w1"
    assert rec.error is not None and rec.error.startswith("stalled 1 times")


def test_at_most_once_jobs_are_recorded_done_and_dead(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["x", "y"])
    claim(r, k, "w1", 2)
    assert TAKE.call(r, TAKE.keys_for(k, "w1"), TAKE.argv([b"x", b"y"])) == [b"x", b"y"]
    out = Outcomes(taken_done=[(1, 1)], taken_dead=[(b"y", env("y"))])
    out.runs[b"x"] = (7, 2)  # its second run, 7 ms long
    out.taken_done_ids.append(b"x")
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), out.ack_taken_argv(10**9, 1000))
    x, y = records.read(r, k, "x"), records.read(r, k, "y")
    assert x is not None and y is not None and (x.outcome, y.outcome) == ("done", "dead")
    assert (x.attempts, x.run_ms) == (2, 7)
    assert enqueue(r, k, ["x"]) == 0


def test_records_go_a_generation_at_a_time_by_count(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.settings, "records_max_len", 5)
    for i in range(12):
        done(r, k, "w1", [f"j{i}"])
    # j0-j4 filled a generation, retired at j5; it went when j5-j9 were retired at j10
    assert kept(r, k, k.records_old) == [f"j{i}" for i in range(5, 10)]
    assert kept(r, k, k.records) == ["j10", "j11"]
    assert records.read(r, k, "j4") is None and records.read(r, k, "j5") is not None
    assert enqueue(r, k, ["j4", "j5"]) == 1  # the id whose record went may come back


def test_records_go_a_generation_at_a_time_by_age(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.settings, "records_max_age_ms", 3_600_000)
    done(r, k, "w1", ["a"])
    r.hset(k.records, "", 1000)  # as if its generation began long ago
    done(r, k, "w1", ["b"])  # retires it: a is kept an age more, in the previous one
    assert (kept(r, k, k.records_old), kept(r, k, k.records)) == (["a"], ["b"])
    reap(r, k)  # retired just now: kept
    assert kept(r, k, k.records_old) == ["a"]
    # on a queue where nothing ends any more, the reaper's sweep lets them go
    r.hset(k.records_old, "", 1000)
    r.hset(k.records, "", 1000)
    reap(r, k)  # the previous goes, the current is retired in its place
    assert (kept(r, k, k.records_old), kept(r, k, k.records)) == (["b"], [])
    r.hset(k.records_old, "", 1000)
    reap(r, k)
    assert not r.exists(k.records_old) and not r.exists(k.records)


def test_records_off_keeps_none_and_lets_the_old_ones_go(r: redis.Redis, k: QueueKeys) -> None:
    done(r, k, "w1", ["a"])
    r.hset(k.settings, "records_max_len", 0)
    done(r, k, "w1", ["b"])
    assert not r.exists(k.records) and not r.exists(k.records_old)
    assert enqueue(r, k, ["a", "b"]) == 2  # with no record, an id can come back


def test_a_resent_stale_ack_counts_its_jobs_once(r: redis.Redis, k: QueueKeys) -> None:
    # an ack that went through, sent again (its reply was lost): not stale at all
    done(r, k, "w2", ["t"])
    assert ack(r, k, "w2", Outcomes(done=[b"t"])) == 0
    assert r.hget(k.stats, "stale_acks") is None
    ids = [f"s{i}" for i in range(38)]
    enqueue(r, k, ids)
    claim(r, k, "w1", 38)
    # the lease was taken back (the worker was cut off): they are not w1's any more
    assert release(r, k, "w1", ReleaseMode.UNSTARTED, ids) == 38
    late = Outcomes(done=[i.encode() for i in ids])
    assert ack(r, k, "w1", late) == 0
    assert ack(r, k, "w1", late) == 0  # sent again: its reply was lost
    assert r.hget(k.stats, "stale_acks") == b"38"
    # another worker's late ack of the same jobs is its own: counted
    assert ack(r, k, "w3", Outcomes(done=[b"s0"])) == 0
    assert r.hget(k.stats, "stale_acks") == b"39"


def test_recent_lists_the_newest_first_by_outcome(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.settings, "records_max_len", 3)
    done(r, k, "w1", ["a", "b"])
    enqueue(r, k, ["d"])
    claim(r, k, "w1", 1)
    ack(r, k, "w1", Outcomes(dead=[(b"d", env("d"))]))
    # when they ended, made apart (one ms may hold them all)
    records.fold(r, k)
    r.hset(k.records, mapping={"a": "done|1000||||w1", "b": "done|2000||||w1"})
    r.hset(k.records, "d", "dead|3000|||boom|w1")
    done(r, k, "w1", ["c"])  # the generation of a, b, d is retired: c begins one
    assert kept(r, k, k.records_old) == ["a", "b", "d"] and kept(r, k, k.records) == ["c"]
    assert [i for i, _ in records.recent(r, k, None, 10)] == ["c", "d", "b", "a"]
    assert [i for i, _ in records.recent(r, k, "done", 2)] == ["c", "b"]
    assert [i for i, _ in records.recent(r, k, "dead", 10)] == ["d"]
    assert records.recent(r, k, "cancelled", 10) == []


def test_a_producer_of_the_13_keys_protocol_still_enqueues(r: redis.Redis, k: QueueKeys) -> None:
    done(r, k, "w1", ["a"])
    argv = ENQUEUE.argv(0, 0, b"", ["b"], [env("b")])
    assert scripts.call(r, ENQUEUE.script, ENQUEUE.keys_for(k)[:13], argv) == 1
    assert r.lrange(k.ready, 0, -1) == [b"b"]


def test_a_done_record_holds_its_run_time_and_attempts(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a", "b", "c"])
    claim(r, k, "w1", 3)
    out = Outcomes()
    out.note_done(b"a", 0, 1)  # a no-op's first run: nothing sent for it but ''
    out.note_done(b"b", 12, 1)
    out.note_done(b"c", 3, 2)
    assert ack(r, k, "w1", out) == 3
    # logged, not a record yet: the read of one job folds them first
    assert r.hget(k.records, "b") is None
    info = get_job(r, k, "c")
    assert info is not None and (info.state, info.attempts, info.worker) == ("done", 2, "w1")
    got = {i: records.read(r, k, i) for i in ("a", "b", "c")}
    assert {i: (rec.attempts, rec.run_ms) for i, rec in got.items() if rec} == {
        "a": (1, 0),
        "b": (1, 12),
        "c": (2, 3),
    }
    # a caller that sends no runs (an HTTP worker, a master for a dead child): the
    # attempts its envelope counts, this run included; its run time not known
    enqueue(r, k, ["d"])
    r.hset(k.jobs, "e", b'{"name": "f", "args": [], "attempts": 2}')  # failed twice
    r.rpush(k.ready, "e")
    claim(r, k, "w1", 2)
    argv = ACK.argv(10**9, 1000, 0, "w1", 0, done=[b"d", b"e"])
    assert ACK.call(r, ACK.keys_for(k, "w1"), argv) == 2
    d, e = records.read(r, k, "d"), records.read(r, k, "e")
    assert d is not None and (d.attempts, d.run_ms, d.worker) == (1, None, "w1")
    assert e is not None and (e.attempts, e.run_ms, e.worker) == (3, None, "w1")


def test_the_runs_of_a_partly_stale_ack_go_to_the_right_ids(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a", "b", "c"])
    claim(r, k, "w1", 3)
    release(r, k, "w1", ReleaseMode.UNSTARTED, ["b"])  # b is no longer w1's
    out = Outcomes()
    for job_id, run_ms, attempt in ((b"a", 5, 1), (b"b", 6, 2), (b"c", 7, 3)):
        out.note_done(job_id, run_ms, attempt)
    assert ack(r, k, "w1", out) == 2
    a, b, c = (records.read(r, k, i) for i in ("a", "b", "c"))
    assert a is not None and c is not None and b is None
    assert (a.run_ms, a.attempts, c.run_ms, c.attempts) == (5, 1, 7, 3)


def acked(r: redis.Redis, k: QueueKeys, worker: str, ids: list[str]) -> int:
    """Ack ``ids`` done (claimed already): their records logged, not folded."""
    return ack(r, k, worker, Outcomes(done=[i.encode() for i in ids]))


def test_an_id_logged_done_is_not_enqueued_again(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a", "c", "d", "e"])
    claim(r, k, "w1", 4)
    acked(r, k, "w1", ["a"])
    # the enqueue is the first to look: it folds, then finds it
    assert enqueue(r, k, ["a", "b"]) == 1 and r.hexists(k.jobs, "b")
    # logged in a generation that was retired since: the same
    r.hset(k.settings, "records_max_len", 2)
    acked(r, k, "w1", ["c", "d"])
    acked(r, k, "w1", ["e"])  # retires c, d (still logged) with their generation
    assert r.hget(k.records_old, "c") is None and r.exists(k.records_old)
    assert enqueue(r, k, ["c", "d", "e", "f"]) == 1
    assert r.hget(k.records_old, "c") is not None  # folded where it was
    info = get_job(r, k, "d")
    assert info is not None and info.state == "done"
    assert records.recent(r, k, "done", 10)[0][0] == "e"


def test_the_reaper_folds_a_few_hundred_logged_records_a_call_while_acks_go_on_and_thousands_after(
    r: redis.Redis, k: QueueKeys
) -> None:
    ids = [f"j{i}" for i in range(7500)]
    for lo in range(0, 7500, 1000):
        enqueue(r, k, ids[lo : lo + 1000])
    assert len(claim(r, k, "w1", 7500)) == 7500
    for lo in range(0, 7500, 1500):
        acked(r, k, "w1", ids[lo : lo + 1500])
    # five batches, and '', the count, the next batch's K, when the last was logged
    assert r.hlen(k.records) == 5 + 4
    now_ms = int(r.time()[0]) * 1000
    busy = reap(r, k)  # a batch was logged just now: 500 a call (a whole batch at least)
    assert r.hlen(k.records) == 1500 + 4 + 5  # and the first batch not folded
    assert 0 <= busy.next_due_ms <= now_ms + 2000  # it comes back once they may pause
    r.hset(k.records, "fastq:t", 1000)  # as if the acks paused long ago
    quiet = reap(r, k)  # 4,000 a call: three batches of 1,500
    assert r.hlen(k.records) == 6000 + 4 + 5 - 3
    assert 0 <= quiet.next_due_ms <= now_ms + 2000
    last = reap(r, k)
    assert last.next_due_ms == -1 and r.hlen(k.records) == 7500 + 3
    assert r.hget(k.records, "j7499") is not None and r.hget(k.records, "fastq:n") == b"7500"
