"""The envelope as Redis holds it (the documented wire format: ``[name, args, t]``
and an object of what else there is, no id or queue, defaults left out), and jobs
queued in the format before an upgrade: they run, retry, show in ``get_job`` and
keep their age limit."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import redis

import fastq
from fastq.protocol.contracts import ENQUEUE
from tests.support.workers import drain


def stored(r: redis.Redis, app: fastq.App, queue: str, job_id: str) -> list[Any]:
    raw = r.hget(app.keys(queue).jobs, job_id)
    assert raw is not None
    env: list[Any] = orjson.loads(raw)
    return env


def test_an_envelope_holds_only_what_is_not_known_elsewhere(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="env")
    def send(to: str = "", n: int = 0, *, body: str = "") -> None: ...

    before = int(time.time() * 1000)
    plain = send.enqueue("a@example.com", 42)
    keyed = send.enqueue_with(priority=3)("b@example.com", body="hi")
    many = send.enqueue_many([("c@example.com",), {"to": "d@example.com", "n": 1}, {}])
    after = int(time.time() * 1000)
    for job_id in [plain, keyed, *many]:
        assert len(job_id) == 14 and job_id.isascii() and job_id.isalnum()
    env = stored(r, app, "env", plain)
    t = env[2]
    assert type(t) is int and before <= t <= after  # integer ms, not text
    assert env == ["send", ["a@example.com", 42], t]
    raw = r.hget(app.keys("env").jobs, plain)
    assert raw == b'["send",["a@example.com",42],%d]' % t
    env = stored(r, app, "env", keyed)
    keyed_t = env[2]
    assert env == ["send", ["b@example.com"], keyed_t, {"k": {"body": "hi"}, "p": 3}]
    envs = [stored(r, app, "env", i) for i in many]
    assert [e[1:2] + e[3:] for e in envs] == [
        [["c@example.com"]],
        [[], {"k": {"to": "d@example.com", "n": 1}}],
        [[]],  # an empty call: no fourth item either
    ]
    info = app.get_job(keyed)
    assert info is not None
    assert (info.name, info.args, info.kwargs, info.queue) == (
        "send",
        ["b@example.com"],
        {"body": "hi"},
        "env",
    )
    assert info.enqueued_at == keyed_t / 1000


def old_envelope(
    job_id: str, name: str, args: list[Any], kwargs: dict[str, Any], **more: Any
) -> bytes:
    """An envelope of the format before (fastq up to the compact one)."""
    env = {"id": job_id, "args": args, "kwargs": kwargs, "name": name, "queue": "old"}
    env.update(enqueued_at=int(time.time() * 1000), priority=0)
    env.update(more)
    return orjson.dumps(env)


def put(r: redis.Redis, app: fastq.App, queue: str, job_id: str, env: bytes) -> None:
    """Queue one envelope as another producer (or an older fastq) wrote it: the
    script of today refuses the format before, so an old one is written as the
    script of its day did (the envelope, the id in the ready list)."""
    if env.startswith(b"["):
        argv = ENQUEUE.argv(0, 0, b"", [job_id], [env])
        assert ENQUEUE.call(r, ENQUEUE.keys_for(app.keys(queue)), argv).added == 1
        return
    keys = app.keys(queue)
    r.sadd(f"{app.namespace}:queues", queue)
    r.hset(keys.jobs, job_id, env)
    r.lpush(keys.ready, job_id)
    r.hincrby(keys.stats, "enqueued", 1)


def test_a_job_queued_in_the_format_before_runs_retries_and_shows(
    app: fastq.App, r: redis.Redis
) -> None:
    runs: list[tuple[int, tuple[Any, ...], dict[str, Any]]] = []

    @app.job(queue="old", retries=1, retry_delays_s=[0])
    def legacy(*args: Any, **kwargs: Any) -> str:
        runs.append((fastq.current_job().attempt, args, kwargs))
        if len(runs) == 1:
            raise RuntimeError("once")
        return "done"

    put(
        r,
        app,
        "old",
        "0be10327166a72a3f4241",
        old_envelope("0be10327166a72a3f4241", "legacy", [1, "x"], {"k": 2}),
    )
    info = app.get_job("0be10327166a72a3f4241")
    assert info is not None and info.state == "queued"
    assert (info.name, info.args, info.kwargs) == ("legacy", [1, "x"], {"k": 2})
    assert info.enqueued_at is not None and abs(info.enqueued_at - time.time()) < 60
    drain(app, ["old"])
    assert runs == [(1, (1, "x"), {"k": 2}), (2, (1, "x"), {"k": 2})]
    stats = app.stats("old")
    assert (stats["processed"], stats["failed"], stats["broken"], stats["dead"]) == (1, 1, 0, 0)


@pytest.mark.parametrize("old", [False, True], ids=["envelope", "envelope-before"])
def test_the_age_limit_reads_the_first_enqueue_of_either_format(
    app: fastq.App, r: redis.Redis, old: bool
) -> None:
    @app.job(queue="old", age_limit_s=60, retry_delays_s=[0])
    def stale() -> None:
        raise RuntimeError("down")

    an_hour_ago = int(time.time() * 1000) - 3_600_000
    if old:
        env = old_envelope("j1", "stale", [], {}, enqueued_at=an_hour_ago)
    else:
        env = orjson.dumps(["stale", [], an_hour_ago])
    put(r, app, "old", "j1", env)
    drain(app, ["old"])
    info = app.get_job("j1")
    assert info is not None and info.state == "dead"
    assert info.enqueued_at == an_hour_ago / 1000
    assert info.last_error is not None
    assert info.last_error.startswith("age limit: first enqueued 3600.")
