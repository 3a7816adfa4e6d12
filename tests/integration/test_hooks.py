"""Users' hooks around jobs and workers (fastq.hooks), in every runner."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import fastq
from fastq.hooks import JobEvent
from tests.support.workers import drain

RUNNERS = [{}, {"threads": 4}, {"async_jobs": 4}]


def _record(app: fastq.App) -> list[tuple[str, str, Any]]:
    seen: list[tuple[str, str, Any]] = []
    lock = threading.Lock()

    def note(what: str, event: JobEvent, extra: Any = None) -> None:
        with lock:
            seen.append((what, event.kwargs.get("tag", ""), extra))

    @app.before_job
    def before(event: JobEvent) -> None:
        assert fastq.current_job().id == event.job_id  # in the job's context
        note("before", event)

    @app.after_job
    def first_after(event: JobEvent) -> None:
        note("after1", event, (event.outcome, type(event.exc).__name__, event.attempt))

    @app.after_job
    def second_after(event: JobEvent) -> None:
        assert event.duration_s >= 0
        note("after2", event)

    @app.on_failure
    def failed(event: JobEvent) -> None:
        note("failure", event, event.outcome)

    return seen


@pytest.mark.parametrize("options", RUNNERS, ids=["sync", "threads", "async"])
def test_hooks_see_each_outcome_in_order(app: fastq.App, options: dict[str, Any]) -> None:
    seen = _record(app)
    is_async = "async_jobs" in options

    if is_async:

        @app.job(queue="q", retries=1, backoff_s=0.001)
        async def work(tag: str) -> Any:
            return _work(tag)

    else:

        @app.job(queue="q", retries=1, backoff_s=0.001)
        def work(tag: str) -> Any:
            return _work(tag)

    for tag in ("ok", "boom", "fail"):
        work.enqueue(tag=tag)
    drain(app, ["q"], **options)

    by_tag: dict[str, list[tuple[str, Any]]] = {}
    for what, tag, extra in seen:
        by_tag.setdefault(tag, []).append((what, extra))
    # after_* hooks in the reverse order of registration; on_failure before them
    assert by_tag["ok"] == [
        ("before", None),
        ("after2", None),
        ("after1", ("done", "NoneType", 1)),
    ]
    assert by_tag["fail"] == [
        ("before", None),
        ("failure", "dead"),
        ("after2", None),
        ("after1", ("dead", "Fail", 1)),
    ]
    assert by_tag["boom"] == [
        ("before", None),
        ("failure", "retried"),
        ("after2", None),
        ("after1", ("retried", "ValueError", 1)),
        ("before", None),
        ("failure", "dead"),
        ("after2", None),
        ("after1", ("dead", "ValueError", 2)),
    ]
    stats = app.stats("q")
    assert stats["dead"] == 2 and stats["ready"] == 0 and stats["scheduled"] == 0


def _work(tag: str) -> Any:
    if tag == "boom":
        raise ValueError("boom")
    if tag == "fail":
        return fastq.Fail("no")
    return None


@pytest.mark.parametrize("options", RUNNERS, ids=["sync", "threads", "async"])
def test_a_hook_that_raises_is_logged_and_loses_no_job(
    app: fastq.App, options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []
    after: list[str] = []

    @app.before_job
    def broken_before(event: JobEvent) -> None:
        raise RuntimeError("before hook bug")

    @app.after_job
    def noted(event: JobEvent) -> None:
        after.append(event.outcome or "")

    @app.after_job
    def broken_after(event: JobEvent) -> None:
        raise RuntimeError("after hook bug")

    if "async_jobs" in options:

        @app.job(queue="q")
        async def work(i: int) -> None:
            ran.append(i)

    else:

        @app.job(queue="q")
        def work(i: int) -> None:
            ran.append(i)

    work.enqueue_many([(i,) for i in range(20)])
    with caplog.at_level(logging.ERROR, logger="fastq.hooks"):
        drain(app, ["q"], **options)
    assert sorted(ran) == list(range(20))
    assert after == ["done"] * 20  # the outcome stands, the later hook still runs
    messages = [r.getMessage() for r in caplog.records if r.name == "fastq.hooks"]
    assert sum("broken_before" in m for m in messages) == 20
    assert sum("broken_after" in m for m in messages) == 20
    stats = app.stats("q")
    assert stats["ready"] == 0 and stats["inflight"] == 0 and stats["dead"] == 0


def test_worker_start_and_stop_hooks(app: fastq.App) -> None:
    calls: list[str] = []
    app.on_worker_start(lambda: calls.append("start"))
    app.on_worker_stop(lambda: calls.append("stop1"))

    @app.on_worker_stop
    def second() -> None:
        calls.append("stop2")
        raise RuntimeError("stop hook bug")  # logged; the worker still stops

    @app.job(queue="q")
    def work() -> None:
        calls.append("job")

    work.enqueue()
    drain(app, ["q"])
    assert calls == ["start", "job", "stop2", "stop1"]


def test_no_hook_keeps_jobs_plain(app: fastq.App) -> None:
    """Without job hooks the native loop runs jobs itself; with one, it does not."""
    from fastq.runners.sync import SyncRunner

    @app.job(queue="q")
    def work() -> None:
        pass

    runner = SyncRunner(None, None, None, app.hooks)  # type: ignore[arg-type]
    assert runner._is_plain(work)
    app.after_job(lambda event: None)
    assert not runner._is_plain(work)
