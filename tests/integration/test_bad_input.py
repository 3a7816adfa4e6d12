"""Bad input gets a clear error up front, or a quarantine with a reason: never a lost job."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

import fastq
from fastq.testing.redis_server import free_port
from tests.support.keys import namespace_keys
from tests.support.workers import drain


class Unserializable:
    pass


@pytest.mark.parametrize(
    "args",
    [({1, 2},), (Unserializable(),), ({1: "int key"},), (2**70,)],
    ids=["set", "object", "int-key", "huge-int"],
)
def test_unserializable_args_raise_typeerror_and_write_nothing(
    app: fastq.App, r: redis.Redis, args: tuple[object, ...]
) -> None:
    @app.job(queue="q")
    def job(x: object) -> None: ...

    with pytest.raises(TypeError):
        job.enqueue(*args)
    with pytest.raises(TypeError, match=r"^call 2: "):
        job.enqueue_many([("fine",), ("fine",), args, ("fine",)])
    assert namespace_keys(r, app.namespace) == []


def test_args_that_do_not_bind_raise_at_enqueue(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="q")
    def send(to: str, subject: str) -> None: ...

    with pytest.raises(TypeError, match="arguments do not fit send"):
        send.enqueue("only-one")
    with pytest.raises(TypeError, match="unexpected keyword"):
        send.enqueue("a", "b", cc="c")
    with pytest.raises(TypeError, match=r"^call 1: arguments do not fit send"):
        send.enqueue_many([("a", "b"), ("a", "b", "c")])
    with pytest.raises(TypeError, match="each call must be a tuple"):
        send.enqueue_many(["just-a-string"])
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        app.enqueue("send", ["a", "b"], kwargs=["not", "a", "dict"])  # type: ignore[arg-type]
    assert namespace_keys(r, app.namespace) == []


@pytest.mark.parametrize("queue", ["a:b", "{a}", "a}", "", "has space"])
def test_invalid_queue_names_are_refused(app: fastq.App, queue: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        app.job(queue=queue)(lambda: None)
    with pytest.raises(ValueError, match="queue name"):
        app.enqueue("anything", queue=queue)


def test_out_of_range_options_are_refused(app: fastq.App) -> None:
    with pytest.raises(ValueError, match="priority"):
        app.enqueue("x", priority=2**40)
    with pytest.raises(TypeError, match="priority"):
        app.enqueue("x", priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries"):
        app.job(retries=-1)(lambda: None)
    with pytest.raises(ValueError, match="delay_s"):
        app.enqueue("x", delay_s=-1)


def _inject(r: redis.Redis, app: fastq.App, queue: str, job_id: str, payload: bytes) -> None:
    keys = app.keys(queue)
    r.hset(keys.jobs, job_id, payload)
    r.lpush(keys.ready, job_id)


def test_undecodable_payloads_are_quarantined_and_the_worker_goes_on(
    app: fastq.App, r: redis.Redis
) -> None:
    ran: list[int] = []

    @app.job(queue="q")
    def good(i: int) -> None:
        ran.append(i)

    good.enqueue(1)
    bad = {
        "not-json": b"\xff\xfe not json",
        "not-object": b'"a string"',
        "short-array": b'["good", [1]]',
        "bad-fields": b'["good", [1], 5, [1]]',
        "unknown-name": orjson.dumps({"id": "x", "name": "no_such_job", "args": [], "kwargs": {}}),
        "args-not-list": orjson.dumps({"id": "x", "name": "good", "args": "1", "kwargs": {}}),
        "kwargs-not-object": orjson.dumps({"id": "x", "name": "good", "args": [1], "kwargs": [1]}),
        "args-do-not-bind": orjson.dumps(
            {"id": "x", "name": "good", "args": [1, 2, 3], "kwargs": {}}
        ),
    }
    for job_id, payload in bad.items():
        _inject(r, app, "q", job_id, payload)
    good.enqueue(2)
    # no grace for an unknown name (a rolling deploy's: tests/fault/test_rolling_deploy.py)
    drain(app, ["q"], batch_size=3, unknown_job_grace_s=0)

    assert ran == [1, 2]
    stats = app.stats("q")
    assert (stats["broken"], stats["processed"], stats["ready"], stats["inflight"]) == (8, 2, 0, 0)
    reasons = {job_id: app.get_job(job_id, queue="q") for job_id in bad}
    for job_id, info in reasons.items():
        assert info is not None and info.state == "broken", job_id
        assert info.raw == bad[job_id]  # the payload is kept byte for byte
    assert "invalid JSON" in (reasons["not-json"].broken_reason or "")  # type: ignore[union-attr]
    assert "not an array or object" in (reasons["not-object"].broken_reason or "")  # type: ignore[union-attr]
    assert "has 2 items, not 3 or 4" in (reasons["short-array"].broken_reason or "")  # type: ignore[union-attr]
    assert "item 4 must be a JSON object" in (reasons["bad-fields"].broken_reason or "")  # type: ignore[union-attr]
    assert "unknown job name 'no_such_job'" in (reasons["unknown-name"].broken_reason or "")  # type: ignore[union-attr]
    assert "args must be a JSON array" in (reasons["args-not-list"].broken_reason or "")  # type: ignore[union-attr]
    assert "kwargs must be a JSON object" in (reasons["kwargs-not-object"].broken_reason or "")  # type: ignore[union-attr]
    assert "arguments do not fit good" in (reasons["args-do-not-bind"].broken_reason or "")  # type: ignore[union-attr]


def test_a_typeerror_raised_inside_a_job_is_a_failure_not_broken(app: fastq.App) -> None:
    @app.job(queue="q", retries=0)
    def buggy(x: int) -> None:
        len(x)  # type: ignore[arg-type]

    job_id = buggy.enqueue(3)
    drain(app, ["q"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead"
    assert (info.last_error or "").startswith("TypeError")


def test_producer_gets_a_clear_error_when_redis_is_unreachable() -> None:
    app = fastq.App(f"redis://127.0.0.1:{free_port()}/0", namespace="nowhere")

    @app.job(queue="q")
    def job() -> None: ...

    t0 = time.monotonic()
    with pytest.raises(fastq.RedisUnavailable, match="cannot reach Redis at redis://127.0.0.1"):
        job.enqueue()
    with pytest.raises(ConnectionError):  # also a builtin ConnectionError
        job.enqueue_many([()])
    with pytest.raises(fastq.RedisUnavailable):
        app.stats("q")
    assert time.monotonic() - t0 < 10
