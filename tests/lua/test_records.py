"""The records of jobs that ended (lib/records.lua), as the scripts that end a job
write them, trim them and read them; and stale acks counted once per job."""

from __future__ import annotations

import orjson
import pytest
import redis
from test_scripts import ack, claim, enqueue, env, reap, release

from fastq.protocol import records
from fastq.protocol.contracts import ACK_TAKEN, TAKE, ReleaseMode
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


def ended(r: redis.Redis, k: QueueKeys) -> list[str]:
    return [i.decode() for i in r.lrange(k.ended, 0, -1)]


def test_a_job_done_leaves_a_record_that_keeps_its_id_from_coming_back(
    r: redis.Redis, k: QueueKeys
) -> None:
    assert done(r, k, "w1", ["a", "b"]) == 2
    rec = records.read(r, k, "a")
    assert rec is not None and (rec.outcome, rec.worker, rec.error) == ("done", "w1", None)
    now_s = int(r.time()[0])
    assert now_s - 5 <= rec.ended_at <= now_s + 1  # Redis' clock
    assert ended(r, k) == ["b", "a"]  # newest first
    info = get_job(r, k, "a")
    assert info is not None and (info.state, info.worker) == ("done", "w1")
    # enqueued again (a producer's retry): nothing added while the record lasts
    assert enqueue(r, k, ["a", "c"]) == 1
    assert r.hkeys(k.jobs) == [b"c"] and r.lrange(k.ready, 0, -1) == [b"c"]


def test_a_dead_job_is_recorded_with_its_attempts_and_error(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["d"])
    claim(r, k, "w1", 1)
    died = orjson.dumps({**orjson.loads(env("d")), "attempts": 3, "error": "ValueError: boom"})
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
    argv = ACK_TAKEN.argv(10**9, 1000, 1, dead=[(b"y", env("y"))], done=[b"x"])
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k), argv)
    x, y = records.read(r, k, "x"), records.read(r, k, "y")
    assert x is not None and y is not None and (x.outcome, y.outcome) == ("done", "dead")
    assert enqueue(r, k, ["x"]) == 0


def test_records_are_trimmed_by_count_a_little_per_call(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.settings, "records_max_len", 5)
    assert done(r, k, "w1", [f"j{i}" for i in range(8)]) == 8
    assert ended(r, k) == [f"j{i}" for i in range(7, 2, -1)]
    assert sorted(r.hkeys(k.records)) == sorted(f"j{i}".encode() for i in range(3, 8))
    # a limit lowered far below what is kept: each call trims its own count + 100
    r.hset(k.settings, "records_max_len", 200)
    done(r, k, "w1", [f"m{i}" for i in range(400)])
    r.hset(k.settings, "records_max_len", 1)
    done(r, k, "w1", ["n0"])
    assert r.llen(k.ended) == 200 - 101 + 1 and r.hlen(k.records) == r.llen(k.ended)
    done(r, k, "w1", ["n1"])
    assert ended(r, k) == ["n1"] and r.hkeys(k.records) == [b"n1"]


def test_records_are_trimmed_by_age_at_the_next_end_or_sweep(r: redis.Redis, k: QueueKeys) -> None:
    # two records that ended long ago (Unix ms 1000 and 2000), then a fresh one
    r.hset(k.records, mapping={"old1": "done|1000||||w", "old2": "done|2000||||w"})
    r.lpush(k.ended, "old1", "old2")
    r.hset(k.settings, "records_max_age_ms", 3_600_000)
    done(r, k, "w1", ["new"])
    assert ended(r, k) == ["new"] and r.hkeys(k.records) == [b"new"]
    # on a queue where nothing ends any more, the reaper's sweep trims them
    r.hset(k.records, "old3", "done|3000||||w")
    r.rpush(k.ended, "old3")
    reap(r, k)
    assert ended(r, k) == ["new"] and r.hkeys(k.records) == [b"new"]


def test_records_off_keeps_none_and_lets_the_old_ones_go(r: redis.Redis, k: QueueKeys) -> None:
    done(r, k, "w1", ["a"])
    r.hset(k.settings, "records_max_len", 0)
    done(r, k, "w1", ["b"])
    assert not r.exists(k.records) and not r.exists(k.ended)
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
    done(r, k, "w1", ["a", "b"])
    enqueue(r, k, ["d"])
    claim(r, k, "w1", 1)
    ack(r, k, "w1", Outcomes(dead=[(b"d", env("d"))]))
    done(r, k, "w1", ["c"])
    assert [i for i, _ in records.recent(r, k, None, 10)] == ["c", "d", "b", "a"]
    assert [i for i, _ in records.recent(r, k, "done", 2)] == ["c", "b"]
    assert [i for i, _ in records.recent(r, k, "dead", 10)] == ["d"]
    assert records.recent(r, k, "cancelled", 10) == []
