"""revive.lua, and the envelopes fastq.protocol.revive hands it, on a real server."""

from __future__ import annotations

import orjson
import pytest
import redis

from fastq.protocol.contracts import REVIVE, ReviveSection
from fastq.protocol.keys import QueueKeys
from fastq.protocol.revive import fresh_envelope, revive


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def bury(r: redis.Redis, k: QueueKeys, job_id: str, envelope: bytes, died_ms: int) -> None:
    """A dead job as ack.lua leaves it."""
    r.hset(k.jobs, job_id, envelope)
    r.zadd(k.dead, {job_id: died_ms})
    r.hset(k.stalls, job_id, 1)


FAILED = orjson.dumps(
    ["send", [1], 1000, {"p": 0, "attempts": 3, "error": "E", "traceback": "T", "failed_at": 5}]
)


def test_fresh_envelope_drops_what_failed_runs_wrote_and_keeps_the_rest() -> None:
    assert fresh_envelope(FAILED) == (orjson.dumps(["send", [1], 1000, {"p": 0}]), 0)
    with_prio = orjson.dumps(["send", [], 1, {"k": {"a": 1}, "p": 7, "attempts": 1}])
    assert fresh_envelope(with_prio) == (orjson.dumps(["send", [], 1, {"k": {"a": 1}, "p": 7}]), 7)
    only_run = orjson.dumps(["send", [], 1, {"attempts": 2, "error": "x"}])
    assert fresh_envelope(only_run) == (orjson.dumps(["send", [], 1]), 0)
    old = orjson.dumps({"name": "send", "args": [], "priority": 2, "attempts": 4})
    assert fresh_envelope(old) == (orjson.dumps({"name": "send", "args": [], "priority": 2}), 2)
    assert fresh_envelope(b"\xffnot json") == (b"\xffnot json", 0)
    assert fresh_envelope(b'"a string"') == (b'"a string"', 0)


def test_revive_requeues_dead_jobs_atomically_and_skips_what_left_the_set(
    r: redis.Redis, k: QueueKeys
) -> None:
    for i in range(3):
        bury(r, k, f"d{i}", FAILED, 100 + i)
    r.hset(k.poison, "d1", "stalled too often")
    jobs = [
        ("d0", b"fresh0", 0),
        ("d1", b"fresh1", 5),  # a priority: into prio
        ("gone", b"x", 0),  # not dead (trimmed meanwhile, say): skipped, nothing written
    ]
    n = REVIVE.call(r, REVIVE.keys_for(k), REVIVE.argv(ReviveSection.DEAD, jobs))
    assert n == 2
    assert r.zrange(k.dead, 0, -1) == [b"d2"]
    assert r.lrange(k.ready, 0, -1) == [b"d0"] and r.zrange(k.prio, 0, -1) == [b"d1"]
    assert r.hmget(k.jobs, ["d0", "d1", "gone"]) == [b"fresh0", b"fresh1", None]
    assert not r.hexists(k.poison, "d1") and r.hkeys(k.stalls) == [b"d2"]
    assert r.hget(k.stats, "revived") == b"2" and r.llen(k.wake) == 1


def test_revive_refuses_bad_input_before_writing(r: redis.Redis, k: QueueKeys) -> None:
    bury(r, k, "d0", FAILED, 100)
    for argv in (["undead", "d0", "e", 0], ["dead", "d0", "e"], ["dead", "d0", "e", "high"]):
        with pytest.raises(redis.ResponseError, match="revive: "):
            REVIVE.call(r, REVIVE.keys_for(k), argv)
    assert r.zrange(k.dead, 0, -1) == [b"d0"] and not r.exists(k.ready)


def test_revive_of_broken_jobs_skips_an_id_without_payload(r: redis.Redis, k: QueueKeys) -> None:
    for i in range(1200):  # more than one call's worth
        r.hset(k.jobs, f"b{i}", orjson.dumps(["later", [i], 1]))
        r.hset(k.broken, f"b{i}", "unknown job name 'later'")
    r.hset(k.broken, "empty", "no payload")
    assert revive(r, k, ReviveSection.BROKEN, None) == (1200, 1)
    assert r.hkeys(k.broken) == [b"empty"] and r.llen(k.ready) == 1200
    # dead, oldest first, up to a limit
    for i in range(5):
        bury(r, k, f"d{i}", FAILED, 100 + i)
    assert revive(r, k, ReviveSection.DEAD, 2) == (2, 0)
    assert r.zrange(k.dead, 0, -1) == [b"d2", b"d3", b"d4"]
