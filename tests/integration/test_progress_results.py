"""Progress reports and kept results, end to end on a real redis-server."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import pytest
import redis

import fastq
from fastq.context import PROGRESS_FLUSH_S
from tests.support.workers import drain, drain_in_thread


def _hset_calls(r: redis.Redis) -> int:
    stats: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
    return int(stats.get("cmdstat_hset", {}).get("calls", 0))


def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


# -- progress ----------------------------------------------------------------------------


def test_progress_is_visible_while_the_job_runs_batched_and_cleared_when_it_ends(
    app: fastq.App, r: redis.Redis
) -> None:
    reported, release = threading.Event(), threading.Event()
    seen: list[fastq.JobContext] = []

    @app.job(queue="p")
    def campaign(n: int) -> None:
        job = fastq.current_job()
        seen.append(job)
        for i in range(n):
            job.set_progress((i + 1) / n, {"sent": i + 1, "of": n})
        reported.set()
        release.wait(10)

    job_id = campaign.enqueue(1000)
    hsets_before = _hset_calls(r)
    _, thread = drain_in_thread(app, ["p"], lease_s=30)
    assert reported.wait(10)
    # the last report shows within a beat of the lease thread
    assert _until(lambda: getattr(app.get_job(job_id), "progress", None) == 1.0)
    time.sleep(2 * PROGRESS_FLUSH_S)
    info = app.get_job(job_id)
    assert info is not None and info.state == "active"
    assert info.progress == 1.0 and info.progress_meta == {"sent": 1000, "of": 1000}
    # 1000 reports, a few writes: one per beat at most (a claim writes no HSET)
    assert _hset_calls(r) - hsets_before <= 4
    assert (seen[0].id, seen[0].queue, seen[0].name, seen[0].attempt) == (
        job_id,
        "p",
        "campaign",
        1,
    )
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    progress_key = app.keys("p").progress
    assert _until(lambda: not r.hexists(progress_key, job_id))


def test_a_retried_job_starts_again_without_its_old_progress(app: fastq.App) -> None:
    runs: list[Any] = []

    @app.job(queue="p", retries=1, retry_delays_s=[0])
    def flaky() -> None:
        job = fastq.current_job()
        runs.append((job.attempt, app.get_job(job.id)))
        job.set_progress(0.5)
        time.sleep(3 * PROGRESS_FLUSH_S)  # the lease thread sends it
        if job.attempt == 1:
            raise RuntimeError("again")

    flaky.enqueue()
    drain(app, ["p"])
    assert [a for a, _ in runs] == [1, 2]
    second = runs[1][1]
    assert second is not None and second.progress is None


def test_set_progress_outside_a_job_is_a_clear_error(app: fastq.App, r: redis.Redis) -> None:
    with pytest.raises(RuntimeError, match="outside a running job"):
        fastq.current_job()
    kept: list[fastq.JobContext] = []
    in_thread: list[BaseException] = []

    @app.job(queue="p")
    def keeps_its_context() -> None:
        kept.append(fastq.current_job())

        def elsewhere() -> None:
            try:
                fastq.current_job()
            except RuntimeError as exc:
                in_thread.append(exc)

        helper = threading.Thread(target=elsewhere)
        helper.start()
        helper.join()

    keeps_its_context.enqueue()
    drain(app, ["p"])
    assert len(in_thread) == 1  # per task: a thread the job starts has no job context
    with pytest.raises(RuntimeError, match="has ended"):
        kept[0].set_progress(0.5)
    time.sleep(2 * PROGRESS_FLUSH_S)
    assert not r.exists(app.keys("p").progress)


def test_bad_progress_is_refused_in_the_job_and_nothing_is_written(
    app: fastq.App, r: redis.Redis
) -> None:
    errors: list[BaseException] = []

    @app.job(queue="p")
    def report() -> None:
        job = fastq.current_job()
        for fraction, meta in (
            (1.5, None),
            (-0.1, None),
            (math.nan, None),
            (math.inf, None),
            ("0.5", None),
            (True, None),
            (0.5, object()),
            (0.5, "x" * 5000),
            (0.5, {1j: 2}),
        ):
            try:
                job.set_progress(fraction, meta)
            except (TypeError, ValueError) as exc:
                errors.append(exc)
        time.sleep(3 * PROGRESS_FLUSH_S)

    job_id = report.enqueue()
    drain(app, ["p"])
    assert len(errors) == 9
    assert all("set_progress" in str(e) for e in errors)
    assert not r.exists(app.keys("p").progress)
    assert (
        getattr(app.get_job(job_id), "state", None) == "done" and app.stats("p")["processed"] == 1
    )


# -- results -----------------------------------------------------------------------------


def test_result_is_kept_with_its_ttl_and_result_waits_for_it(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="r", result_ttl_s=60)
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    job_id = add.enqueue(1, 2)
    threading.Timer(0.5, lambda: drain(app, ["r"])).start()
    started = time.monotonic()
    assert app.result(job_id, timeout_s=10) == {"sum": 3}
    waited_s = time.monotonic() - started
    assert 0.4 < waited_s < 2.0  # it waited for the worker, and woke when it finished
    assert 55_000 < r.pttl(app.keys("r").result(job_id)) <= 60_000
    assert 55_000 < r.pttl(app.keys("r").result_ready(job_id)) <= 60_000
    # read again: the value stays until it expires, for every reader
    assert app.result(job_id, timeout_s=0, queue="r") == {"sum": 3}


def test_result_of_a_dead_job_raises_its_error(app: fastq.App) -> None:
    @app.job(queue="r", retries=0, result_ttl_s=60)
    def boom() -> int:
        raise ValueError("the template has a typo")

    job_id = boom.enqueue()
    threading.Timer(0.3, lambda: drain(app, ["r"])).start()
    with pytest.raises(fastq.JobFailed, match="the template has a typo") as failed:
        app.result(job_id, timeout_s=10)
    assert failed.value.state == "dead" and failed.value.job_id == job_id
    assert failed.value.traceback is not None and "ValueError" in failed.value.traceback


def test_result_times_out_cleanly_and_nothing_changes(app: fastq.App) -> None:
    @app.job(queue="r", result_ttl_s=60)
    def later() -> int:
        return 1

    job_id = later.enqueue()
    started = time.monotonic()
    with pytest.raises(fastq.ResultTimeout, match=job_id) as timeout:
        app.result(job_id, timeout_s=0.5)
    assert isinstance(timeout.value, TimeoutError)
    assert 0.45 < time.monotonic() - started < 1.5
    info = app.get_job(job_id)
    assert info is not None and info.state == "queued"


def test_result_of_an_unknown_job_or_one_that_keeps_none(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="r")
    def plain() -> int:
        return 7

    job_id = plain.enqueue()
    sets_before = int(r.info("commandstats").get("cmdstat_set", {}).get("calls", 0))  # type: ignore[union-attr]
    drain(app, ["r"])
    # a job without result_ttl_s writes no result at all: the one SET is the queue's
    # marker, written by the first worker to serve it (fastq.protocol.markers)
    assert r.exists(app.keys("r").marker)
    assert int(r.info("commandstats").get("cmdstat_set", {}).get("calls", 0)) == sets_before + 1  # type: ignore[union-attr]
    assert not r.exists(app.keys("r").result(job_id))
    with pytest.raises(fastq.NoResult):
        app.result(job_id, timeout_s=5)
    with pytest.raises(fastq.NoResult):
        app.result("no-such-job", timeout_s=5, queue="r")


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, math.nan, [math.inf], {"x": b"bytes"}, "x" * (600 * 1024)]
)
def test_a_result_json_cannot_keep_fails_the_job_clearly(app: fastq.App, value: Any) -> None:
    @app.job(queue="r", retries=0, result_ttl_s=60)
    def odd() -> Any:
        return value

    job_id = odd.enqueue()
    drain(app, ["r"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead"  # not lost: buried with the reason
    assert info.last_error is not None and "ResultNotSerializable" in info.last_error
    with pytest.raises(fastq.JobFailed, match="result_ttl_s|MAX_RESULT_BYTES"):
        app.result(job_id, timeout_s=1)


def test_a_result_json_cannot_keep_is_retried_by_the_policy(app: fastq.App) -> None:
    calls: list[int] = []

    @app.job(queue="r", retries=1, retry_delays_s=[0], result_ttl_s=60)
    def once_odd() -> Any:
        calls.append(1)
        return object() if len(calls) == 1 else "fine"

    job_id = once_odd.enqueue()
    drain(app, ["r"])
    assert len(calls) == 2
    assert app.result(job_id, timeout_s=1) == "fine"


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, 10**9, "60", True])
def test_bad_result_ttl_is_refused_at_registration(app: fastq.App, ttl: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="result_ttl_s"):

        @app.job(queue="r", result_ttl_s=ttl)
        def f() -> None: ...

    assert "f" not in app.registry


@pytest.mark.parametrize("timeout", [-1, math.nan, math.inf, "1"])
def test_bad_result_timeout_is_refused(app: fastq.App, timeout: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="timeout_s"):
        app.result("some-id", timeout_s=timeout)
