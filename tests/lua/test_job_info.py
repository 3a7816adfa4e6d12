"""job_info.lua on a real server: a job read back in every state, from its envelope,
its indexes or its record; the reply as a client of any language gets it; and a
hand-written bad envelope reads without breaking anything."""

from __future__ import annotations

import re
from typing import Any, Sequence

import orjson
import pytest
import redis

from fastq.protocol import scripts
from fastq.protocol.contracts import (
    ACK,
    CANCEL,
    CLAIM,
    ENQUEUE,
    JOB_INFO,
    RELEASE,
    JobInfoReply,
    ReleaseMode,
    enqueue_extras,
)
from fastq.protocol.introspect import broken_jobs, dead_jobs, get_job, read_job
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from tests.support.keys import namespace_keys

T0 = 1_795_457_347_206  # an enqueue time (ms)


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def env(name: str = "send", args: Sequence[Any] = (1, "a"), **more: Any) -> bytes:
    """An envelope as the Python producer writes it (docs/protocol.md)."""
    items: list[Any] = [name, list(args), T0]
    if more:
        items.append(more)
    return orjson.dumps(items)


def put(
    r: redis.Redis,
    k: QueueKeys,
    job_id: str,
    envelope: bytes,
    delay_ms: int = 0,
    tags: Sequence[str] = (),
) -> None:
    """Enqueue ``job_id``, then give it ``envelope`` as a worker's retry (or a hand)
    rewrites it: the enqueue script refuses the fields only workers write."""
    plain = b'["send",[],%d]' % T0
    argv = ENQUEUE.argv(0, delay_ms, enqueue_extras(tags, None, 0), [job_id], [plain])
    assert ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added == 1
    r.hset(k.jobs, job_id, envelope)


def claim(r: redis.Redis, k: QueueKeys, worker: str, n: int = 10) -> list[bytes]:
    return CLAIM.call(r, CLAIM.keys_for(k, worker), CLAIM.argv(worker, n, 60_000, 100)).ids


def ack(r: redis.Redis, k: QueueKeys, worker: str, out: Outcomes) -> int:
    return ACK.call(r, ACK.keys_for(k, worker), out.ack_argv(10**9, 1000, worker))


def call(r: redis.Redis, k: QueueKeys, job_id: str, workers: Sequence[str] = ()) -> list[Any]:
    """The raw reply of one call, as a client of another language gets it."""
    keys = JOB_INFO.keys_for(k, job_id=job_id) + [k.held(w) for w in workers]
    reply: list[Any] = scripts.call(r, JOB_INFO.script, keys, JOB_INFO.argv(workers, job_id))
    return reply


def read(r: redis.Redis, k: QueueKeys, job_id: str) -> JobInfoReply:
    """The reply with the workers holding leases named (what ``read_job`` does)."""
    before = namespace_keys(r, k.namespace)
    reply = read_job(r, k, job_id)
    assert namespace_keys(r, k.namespace) == before  # a read writes nothing
    return reply


def now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_queued_job_reads_back_with_its_envelope(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "a", env(args=[1, "a"], k={"x": 2}), tags=["red", "blue"])
    raw = call(r, k, "a")
    # {version, state, field, value, ...}: the flat reply a foreign client reads
    assert raw[:2] == [1, b"queued"]
    fields = dict(zip(raw[2::2], raw[3::2]))
    assert fields == {
        b"envelope": env(args=[1, "a"], k={"x": 2}),
        b"name": b"send",
        b"enqueued_ms": T0,
        b"tags": [b"red", b"blue"],
    }
    info = get_job(r, k, "a")
    assert info is not None
    assert (info.state, info.name, info.args, info.kwargs) == ("queued", "send", [1, "a"], {"x": 2})
    assert (info.enqueued_at, info.tags, info.attempts) == (T0 / 1000, ["red", "blue"], 0)


def test_a_scheduled_job_says_when_it_is_due(r: redis.Redis, k: QueueKeys) -> None:
    before = now_ms(r)
    put(r, k, "s", env(), delay_ms=60_000)
    reply = read(r, k, "s")
    assert reply.state == "scheduled"
    assert before + 60_000 <= reply.fields["due_ms"] <= now_ms(r) + 60_000


def test_an_active_job_names_its_worker_and_lease(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "x", env())
    claim(r, k, "w1")
    put(r, k, "y", env())
    claim(r, k, "w2")
    # named by the caller: the workers in leases, in any order
    raw = call(r, k, "y", ["w1", "w2"])
    assert raw[1] == b"active"
    fields = dict(zip(raw[2::2], raw[3::2]))
    assert fields[b"worker"] == b"w2"
    assert fields[b"lease_until_ms"] == int(r.zscore(k.leases, "w2") or 0)
    reply = read(r, k, "x")
    assert (reply.state, reply.fields["worker"]) == ("active", "w1")


def test_workers_not_those_in_leases_get_the_current_list_and_nothing_else(
    r: redis.Redis, k: QueueKeys
) -> None:
    put(r, k, "x", env())
    claim(r, k, "w1")
    assert call(r, k, "x") == [1, b"stale", b"workers", [b"w1"]]
    assert call(r, k, "x", ["w1", "w9"])[1] == b"stale"
    assert call(r, k, "x", ["w9"]) == [1, b"stale", b"workers", [b"w1"]]
    assert call(r, k, "x", ["w1"])[1] == b"active"


def test_a_progress_report_and_stalls_read_back(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "p", env())
    claim(r, k, "w1")
    r.hset(k.progress, "p", orjson.dumps({"fraction": 0.5, "meta": {"step": 2}}))
    r.hset(k.stalls, "p", 2)
    info = get_job(r, k, "p")
    assert info is not None
    assert (info.progress, info.progress_meta, info.stalls) == (0.5, {"step": 2}, 2)


def test_a_retried_job_carries_its_attempts_and_last_error(r: redis.Redis, k: QueueKeys) -> None:
    failed = env(attempts=2, error="ValueError: boom", traceback="Traceback...", failed_at=T0 + 5)
    put(r, k, "f", failed, delay_ms=30_000)
    reply = read(r, k, "f")
    assert reply.state == "scheduled"
    assert {f: reply.fields[f] for f in ("attempts", "error", "traceback", "failed_ms")} == {
        "attempts": 2,
        "error": "ValueError: boom",
        "traceback": "Traceback...",
        "failed_ms": T0 + 5,
    }


def test_a_dead_job_reads_from_its_envelope_and_its_record(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "d", env())
    claim(r, k, "w1")
    died = env(attempts=3, error="KeyError: 'x'", failed_at=T0 + 9)
    ack(r, k, "w1", Outcomes(dead=[(b"d", died)]))
    reply = read(r, k, "d")
    assert reply.state == "dead"
    f = reply.fields
    assert (f["attempts"], f["error"], f["worker"], f["failed_ms"]) == (
        3,
        "KeyError: 'x'",
        "w1",
        T0 + 9,
    )
    assert f["ended_ms"] == int(r.zscore(k.dead, "d") or 0)
    # trimmed from the dead set, it is known by its record alone
    r.zrem(k.dead, "d")
    r.hdel(k.jobs, "d")
    reply = read(r, k, "d")
    assert reply.state == "dead" and "envelope" not in reply.fields
    assert (reply.fields["attempts"], reply.fields["error"]) == (3, "KeyError: 'x'")
    assert reply.fields["failed_ms"] == reply.fields["ended_ms"]


def test_a_poison_job_says_how_it_died(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "p", env(error="earlier failure"))
    claim(r, k, "w1")
    argv = RELEASE.argv("w1", ReleaseMode.STALLED, 0, "killed by SIGKILL", ids=[b"p"])
    RELEASE.call(r, RELEASE.keys_for(k, "w1"), argv)
    info = get_job(r, k, "p")
    assert info is not None and info.state == "dead"
    assert info.last_error is not None and info.last_error.startswith("stalled 1 times")
    assert info.stalls == 1 and info.worker == "w1"


def test_a_done_job_reads_from_its_record_with_its_result(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "ok", env())
    claim(r, k, "w1")
    r.set(k.result("ok"), b'{"sent":3}', px=60_000)
    ack(r, k, "w1", Outcomes(done=[b"ok"]))
    raw = call(r, k, "ok", ["w1"])  # its lease stays (an idle worker keeps one)
    assert raw[1] == b"done"
    fields = dict(zip(raw[2::2], raw[3::2]))
    assert fields[b"worker"] == b"w1" and fields[b"result"] == b'{"sent":3}'
    assert b"envelope" not in fields and b"ended_ms" in fields
    info = get_job(r, k, "ok")
    assert info is not None
    assert (info.state, info.worker, info.result, info.has_result) == (
        "done",
        "w1",
        {"sent": 3},
        True,
    )


def test_a_cancelled_job_by_its_record_and_by_its_marker(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "c", env())
    reply = CANCEL.call(r, CANCEL.keys_for(k), CANCEL.argv("", 1, [], ["c"]))
    assert reply.stopped == 1
    got = read(r, k, "c")
    assert got.state == "cancelled" and got.fields["cancelled_ms"] == got.fields["ended_ms"]
    # records off (or gone): the marker still says so
    r.delete(k.records, k.records_old)
    got = read(r, k, "c")
    assert got.state == "cancelled" and got.fields["cancelled_ms"] == int(
        r.zscore(k.cancelled, "c") or 0
    )


def test_a_broken_job_with_and_without_its_payload(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "b", b'["send",{"not":"args"},1]')
    r.hset(k.broken, "b", "args must be a JSON array, not dict")
    reply = read(r, k, "b")
    assert (
        reply.state == "broken" and reply.fields["broken"] == "args must be a JSON array, not dict"
    )
    r.hdel(k.jobs, "b")
    reply = read(r, k, "b")
    assert reply.state == "broken" and "envelope" not in reply.fields


def test_an_unknown_id_is_unknown(r: redis.Redis, k: QueueKeys) -> None:
    assert call(r, k, "ghost") == [1, b"unknown"]
    assert get_job(r, k, "ghost") is None


@pytest.mark.parametrize(
    "envelope",
    [
        b"not json",
        b'["send",[1],"yesterday"]',
        b'["send",[1],null,{"attempts":"three","error":7,"failed_at":"now"}]',
        b'[7,"args",1e400,[]]',
        b'"just a string"',
        b"[]",
        b'{"name":"send","args":[2],"enqueued_at":"x"}',
    ],
)
def test_a_hand_written_bad_envelope_reads_without_its_bad_fields(
    r: redis.Redis, k: QueueKeys, envelope: bytes
) -> None:
    r.hset(k.jobs, "bad", envelope)
    r.rpush(k.ready, "bad")
    reply = read(r, k, "bad")
    assert reply.state == "queued" and reply.fields["envelope"] == envelope
    assert set(reply.fields) <= {"envelope", "name"}
    info = get_job(r, k, "bad")
    assert info is not None and info.raw == envelope
    assert info.enqueued_at is None and info.attempts == 0 and info.last_error is None


@pytest.mark.parametrize(
    "keys_extra, argv, message",
    [
        (0, [0], "0 workers need as many held sets"),  # no job id
        (1, [0, "j"], "0 workers need as many held sets"),  # a held set too many
        (0, [1, "w1", "j"], "1 workers need as many held sets"),  # its held set missing
        (0, ["two", "j"], "workers (ARGV[1]) must be an integer"),
        (0, [0, ""], "the job id (ARGV[2]) must not be empty"),
        (0, [5001, "j"], "workers (ARGV[1]) must be <= 5000"),
    ],
)
def test_a_malformed_call_is_refused(
    r: redis.Redis, k: QueueKeys, keys_extra: int, argv: list[Any], message: str
) -> None:
    keys = JOB_INFO.keys_for(k, job_id="j") + [k.held(f"w{i}") for i in range(keys_extra)]
    with pytest.raises(redis.ResponseError, match=re.escape(message)):
        scripts.call(r, JOB_INFO.script, keys, argv)


def test_dead_and_broken_listings_take_a_hand_written_bad_envelope(
    r: redis.Redis, k: QueueKeys
) -> None:
    bad = b'["send",[1],"yesterday",{"attempts":"3","failed_at":"now","error":"E"}]'
    r.hset(k.jobs, mapping={"d": bad, "b": bad})
    r.zadd(k.dead, {"d": T0})
    r.hset(k.broken, "b", "hand-written")
    [dead] = dead_jobs(r, k, 10)
    assert (dead.id, dead.enqueued_at, dead.failed_at, dead.last_error) == (
        "d",
        None,
        T0 / 1000,
        "E",
    )
    [broken] = broken_jobs(r, k, 10)
    assert (broken.id, broken.enqueued_at, broken.broken_reason) == ("b", None, "hand-written")


def test_a_result_that_is_not_json_is_none(r: redis.Redis, k: QueueKeys) -> None:
    put(r, k, "x", env())
    r.set(k.result("x"), b"not json")
    assert read(r, k, "x").fields["result"] == b"not json"  # as Redis holds it
    info = get_job(r, k, "x")
    assert info is not None and (info.result, info.has_result) == (None, False)
