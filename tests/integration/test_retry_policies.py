"""Retry policies end to end: the due times a worker's ack writes into the scheduled
set follow each policy's formula; per-enqueue overrides travel in the envelope;
the age limit and ``fail_on`` bury a job with a clear reason. In-process burst
workers on a real redis-server."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import orjson
import pytest
import redis

import fastq
import fastq.runners.settle
from fastq.protocol.introspect import JobInfo
from tests.support.workers import drain, drain_in_thread

SLACK_S = 0.25  # from the worker's failed_at to the ack's Redis TIME, on a loaded box


def _wait_for(app: fastq.App, job_id: str, ok: Callable[[JobInfo], bool]) -> JobInfo:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = app.get_job(job_id)
        if info is not None and ok(info):
            return info
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} never got there: {app.get_job(job_id)}")


def delays_through_worker(
    app: fastq.App, r: redis.Redis, job: fastq.JobDef[Any], failures: int, **options: Any
) -> tuple[list[float], JobInfo]:
    """Enqueue ``job`` (which always raises) and let a worker fail it ``failures``
    times; after each failure read the delay its ack scheduled (due time less the
    time it failed), then make it due at once. Returns the delays and the job as it
    ends (dead)."""
    job_id = job.enqueue_with(**options)()
    return delays_through_worker_existing(app, r, job.queue, job_id, failures)


def assert_delays(measured: list[float], expected_s: list[float]) -> None:
    assert len(measured) == len(expected_s)
    for n, (got, want) in enumerate(zip(measured, expected_s)):
        assert want - 0.002 <= got <= want + SLACK_S, (n, measured, expected_s)


@pytest.fixture
def fixed_draw(monkeypatch: pytest.MonkeyPatch) -> float:
    """The uniform draw of curves with jitter, fixed."""
    monkeypatch.setattr(fastq.runners.settle, "draw", lambda: 0.5)
    return 0.5


def test_exponential_with_cap_doubles_then_holds(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="q", retries=4, backoff_s=1, max_backoff_s=5, jitter=0.0)
    def flaky() -> None:
        raise ConnectionError("down")

    delays, final = delays_through_worker(app, r, flaky, 4)
    assert_delays(delays, [1, 2, 4, 5])  # 1 * 2**n, capped at 5
    assert final.state == "dead" and final.attempts == 5


def test_exponential_jitter_uses_the_draw(
    app: fastq.App, r: redis.Redis, fixed_draw: float
) -> None:
    @app.job(queue="q", retries=2, retry=fastq.Exponential(backoff_s=2, jitter=0.5))
    def flaky() -> None:
        raise ConnectionError("down")

    delays, _ = delays_through_worker(app, r, flaky, 2)
    # the top half of each delay scaled by the draw: d/2 + d/2 * 0.5
    assert_delays(delays, [d * 0.5 + d * 0.5 * fixed_draw for d in (2, 4)])


def test_polynomial_follows_sidekiqs_curve(
    app: fastq.App, r: redis.Redis, fixed_draw: float
) -> None:
    @app.job(queue="q", retries=4, retry=fastq.Polynomial())
    def flaky() -> None:
        raise ConnectionError("down")

    delays, final = delays_through_worker(app, r, flaky, 4)
    # n**4 + 15 + draw * 10 * (n + 1), n = retries before this one (Sidekiq's retry_count)
    assert_delays(delays, [n**4 + 15 + fixed_draw * 10 * (n + 1) for n in range(4)])
    assert delays[3] > 100  # 81 + 15 + 20: the curve bends up
    assert final.state == "dead"


def test_bounded_doubling_doubles_then_grows_linearly_to_the_cap(
    app: fastq.App, r: redis.Redis
) -> None:
    policy = fastq.BoundedDoubling(min_backoff_s=1, max_backoff_s=11, max_doublings=2)

    @app.job(queue="q", retries=7, retry=policy)
    def flaky() -> None:
        raise ConnectionError("down")

    delays, _ = delays_through_worker(app, r, flaky, 7)
    # doubled twice (1, 2, 4), then + 2**(2-1) * 1 per retry (6, 8, 10), capped at 11
    assert_delays(delays, [1, 2, 4, 6, 8, 10, 11])


def test_geometric_multiplies_by_its_ratio(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="q", retries=4, retry=fastq.Geometric(backoff_s=0.5, ratio=3, max_backoff_s=10))
    def flaky() -> None:
        raise ConnectionError("down")

    delays, _ = delays_through_worker(app, r, flaky, 4)
    assert_delays(delays, [0.5, 1.5, 4.5, 10])  # 0.5 * 3**n, capped at 10


def test_explicit_delays_repeat_the_last(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="q", retries=5, retry_delays_s=[1, 10, 60])
    def flaky() -> None:
        raise ConnectionError("down")

    delays, final = delays_through_worker(app, r, flaky, 5)
    assert_delays(delays, [1, 10, 60, 60, 60])
    assert final.state == "dead" and final.attempts == 6
    assert final.last_error == "ConnectionError: down"


def test_retry_delay_overrides_the_policy_once(
    app: fastq.App, r: redis.Redis, fixed_draw: float
) -> None:
    runs = []

    @app.job(queue="q", retries=2, retry=fastq.Polynomial())
    def asks_then_fails() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise fastq.Retry(delay_s=3)
        raise ConnectionError("down")

    job_id = asks_then_fails.enqueue()
    _, thread = drain_in_thread(app, ["q"], idle_timeout_s=0.05, burst_horizon_s=3600)
    info = _wait_for(app, job_id, lambda i: i.state == "scheduled" and i.attempts == 1)
    assert info.due_at is not None and info.enqueued_at is not None
    assert 3 - 0.002 <= info.due_at - info.enqueued_at <= 3 + SLACK_S  # Retry's own delay
    r.zadd(app.keys("q").scheduled, {job_id: 0})
    info = _wait_for(app, job_id, lambda i: i.state == "scheduled" and i.attempts == 2)
    assert info.due_at is not None and info.failed_at is not None
    # then the policy again, for the second retry (n = 1): 1 + 15 + 0.5 * 20
    assert 26 - 0.002 <= info.due_at - info.failed_at <= 26 + SLACK_S
    r.zadd(app.keys("q").scheduled, {job_id: 0})
    thread.join(10)
    assert not thread.is_alive()


def _envelope(r: redis.Redis, app: fastq.App, queue: str, job_id: str) -> dict[str, Any]:
    """The fields of a stored envelope ``[name, args, t, {fields}]`` (its 4th item)."""
    raw: Optional[bytes] = r.hget(app.keys(queue).jobs, job_id)  # type: ignore[assignment]
    assert raw is not None
    env: list[Any] = orjson.loads(raw)
    fields: dict[str, Any] = env[3] if len(env) == 4 else {}
    return fields


def test_enqueue_overrides_travel_in_the_envelope_only_when_they_differ(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="q", retries=3, retry_delays_s=[100], age_limit_s=3600)
    def flaky() -> None:
        raise ConnectionError("down")

    plain = flaky.enqueue()
    same = flaky.enqueue_with(retry=fastq.Delays([100]), retries=3, age_limit_s=3600)()
    other = flaky.enqueue_with(retry=fastq.Delays([7, 8]), retries=1, age_limit_s=60)()
    for job_id in (plain, same):
        env = _envelope(r, app, "q", job_id)
        assert not {"backoff", "retries", "age_limit_ms"} & set(env)
    env = _envelope(r, app, "q", other)
    assert (env["backoff"], env["retries"], env["age_limit_ms"]) == (
        ["list", [7000, 8000]],
        1,
        60000,
    )
    ids = app.enqueue_many("flaky", [()], retry=fastq.Geometric(1, 2), queue="q")
    assert _envelope(r, app, "q", ids[0])["backoff"] == ["geo", 1000, 2.0, fastq.retry.MAX_DELAY_MS]
    r.delete(app.keys("q").ready)  # only the overridden one runs
    r.lpush(app.keys("q").ready, other)

    delays, final = delays_through_worker_existing(app, r, "q", other, 1)
    assert_delays(delays, [7])
    assert final.state == "dead" and final.attempts == 2  # retries=1 from the envelope


def delays_through_worker_existing(
    app: fastq.App, r: redis.Redis, queue: str, job_id: str, failures: int
) -> tuple[list[float], JobInfo]:
    """As :func:`delays_through_worker`, for a job already enqueued."""
    # a burst worker that waits out every backoff: the test makes each retry due at once
    _, thread = drain_in_thread(app, [queue], idle_timeout_s=0.05, burst_horizon_s=3600)
    delays = []
    for k in range(1, failures + 1):
        info = _wait_for(app, job_id, lambda i, k=k: i.state == "scheduled" and i.attempts == k)
        assert info.due_at is not None and info.failed_at is not None
        delays.append(info.due_at - info.failed_at)
        r.zadd(app.keys(queue).scheduled, {job_id: 0})
    thread.join(10)
    assert not thread.is_alive()
    final = app.get_job(job_id)
    assert final is not None
    return delays, final


def test_an_unreadable_override_falls_back_to_the_jobs_policy(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    @app.job(queue="q", retries=1, retry_delays_s=[2])
    def flaky() -> None:
        raise ConnectionError("down")

    job_id = flaky.enqueue()
    env = orjson.loads(r.hget(app.keys("q").jobs, job_id))  # type: ignore[arg-type]
    env[3:] = [{"backoff": ["sidekiq", "soon"]}]  # what a producer in another language got wrong
    r.hset(app.keys("q").jobs, job_id, orjson.dumps(env))
    delays, final = delays_through_worker_existing(app, r, "q", job_id, 1)
    assert_delays(delays, [2])
    assert final.state == "dead"
    assert "invalid retry policy in the envelope" in caplog.text


@pytest.mark.parametrize("bad", ["many", -1, 1.5, True])
def test_unreadable_retries_written_past_the_script_are_logged(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture, bad: Any
) -> None:
    """The enqueue script refuses them; one written by hand (HSET) is said, and the
    job's own policy applies: "many" is not "none", -1 not "none" either."""

    @app.job(queue="q", retries=1, retry_delays_s=[0])
    def flaky() -> None:
        raise ConnectionError("down")

    job_id = flaky.enqueue()
    env = orjson.loads(r.hget(app.keys("q").jobs, job_id))  # type: ignore[arg-type]
    env[3:] = [{"retries": bad}]
    r.hset(app.keys("q").jobs, job_id, orjson.dumps(env))
    drain(app, ["q"])
    final = app.get_job(job_id)
    assert final is not None and final.state == "dead" and final.attempts == 2
    assert f"invalid retries in the envelope: {bad!r}" in caplog.text


def test_age_limit_sends_an_old_job_dead_saying_why(app: fastq.App) -> None:
    runs = []

    @app.job(queue="q", retries=10, backoff_s=0, age_limit_s=0.5)
    def flaky() -> None:
        runs.append(1)
        raise ConnectionError("smtp went away")

    # it first runs 0.6 s after its enqueue: older than its age limit when it fails
    job_id = flaky.enqueue_with(delay_s=0.6)()
    drain(app, ["q"], idle_timeout_s=0.05)
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead"
    assert len(runs) == 1 and info.attempts == 1
    assert info.last_error is not None
    assert info.last_error.startswith("age limit: first enqueued ")
    assert "beyond its age_limit_s of 0.5 s: not retried" in info.last_error
    assert info.last_error.endswith("last error: ConnectionError: smtp went away")
    assert info.traceback is not None and "smtp went away" in info.traceback


def test_age_limit_refuses_a_retry_that_would_start_too_late(app: fastq.App) -> None:
    @app.job(queue="q", retries=10, retry_delays_s=[120], age_limit_s=60)
    def flaky() -> None:
        raise ConnectionError("down")

    @app.job(queue="q", retries=10, retry_delays_s=[120])
    def asks() -> None:
        raise fastq.Retry(delay_s=30)

    late = flaky.enqueue()
    asked = asks.enqueue_with(age_limit_s=10)()  # the override applies to Retry too
    drain(app, ["q"], idle_timeout_s=0.05)
    for job_id in (late, asked):
        info = app.get_job(job_id)
        assert info is not None and info.state == "dead" and info.attempts == 1
        assert info.last_error is not None and info.last_error.startswith("age limit:")


def test_a_young_job_is_retried_under_its_age_limit(app: fastq.App) -> None:
    @app.job(queue="q", retries=2, backoff_s=0, age_limit_s=60)
    def flaky() -> None:
        raise ConnectionError("down")

    job_id = flaky.enqueue()
    drain(app, ["q"], idle_timeout_s=0.05)
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead" and info.attempts == 3
    assert info.last_error == "ConnectionError: down"


def test_fail_on_fails_at_once_before_retry_on(
    app: fastq.App, caplog: pytest.LogCaptureFixture
) -> None:
    runs: dict[str, int] = {}

    @app.job(queue="q", retries=5, backoff_s=0, fail_on=(KeyError,), retry_on=(Exception,))
    def lookup(kind: str) -> None:
        runs[kind] = runs.get(kind, 0) + 1
        if kind == "missing":
            raise KeyError("no such user")
        if runs[kind] < 3:
            raise ConnectionError("down")

    missing = lookup.enqueue("missing")
    flaky = lookup.enqueue("flaky")
    drain(app, ["q"], idle_timeout_s=0.05)
    assert runs == {"missing": 1, "flaky": 3}
    info = app.get_job(missing)
    assert info is not None and info.state == "dead" and info.attempts == 1
    assert info.last_error == "KeyError: 'no such user'"
    assert getattr(app.get_job(flaky), "state", None) == "done"  # done
    assert "failed at once (KeyError is in fail_on)" in caplog.text
    assert app.stats("q")["failed"] == 3
