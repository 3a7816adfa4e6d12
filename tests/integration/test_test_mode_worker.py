"""The test mode runs jobs as a worker runs them (app.stub() + jobs.run(), and
app.eager()): fastq.current_job(), the app's hooks, retries by the job's policy
(the backoff not slept), kept results and progress reports. No Redis: the app's
URL is a port nothing listens on."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest

import fastq
from fastq.hooks import JobEvent
from fastq.producer.testmode import QueuedJobs

NO_REDIS = "redis://127.0.0.1:1/0"


class Recorded:
    """An app whose hooks record (hook, job name, attempt, outcome, current_job's id)."""

    def __init__(self) -> None:
        self.app = app = fastq.App(NO_REDIS)
        self.calls: list[tuple[str, str, int, Any]] = []

        @app.before_job
        def before(event: JobEvent) -> None:
            # in the job's context, as in a worker
            assert fastq.current_job().id == event.job_id
            self.calls.append(("before", event.name, event.attempt, None))

        @app.on_failure
        def failed(event: JobEvent) -> None:
            self.calls.append(("failure", event.name, event.attempt, event.outcome))

        @app.after_job
        def after(event: JobEvent) -> None:
            self.calls.append(("after", event.name, event.attempt, event.outcome))


Check = Callable[[str, QueuedJobs], None]


def run_stub(
    app: fastq.App, enqueue: Callable[[], str], then: Check = lambda *_: None
) -> tuple[str, QueuedJobs]:
    """Enqueue in a stub, run what it kept, and ``then(job_id, jobs)`` in the block."""
    with app.stub() as jobs:
        job_id = enqueue()
        assert jobs.runs == []  # kept, not run
        jobs.run()
        then(job_id, jobs)
    return job_id, jobs


def run_eager(
    app: fastq.App, enqueue: Callable[[], str], then: Check = lambda *_: None
) -> tuple[str, QueuedJobs]:
    """Enqueue in an eager app (it runs there), and ``then(job_id, jobs)`` in the block."""
    with app.eager() as jobs:
        job_id = enqueue()
        then(job_id, jobs)
    return job_id, jobs


MODES = [run_stub, run_eager]


@pytest.mark.parametrize("mode", MODES, ids=["stub", "eager"])
def test_a_job_sees_current_job_and_reports_progress_hooks_around_it(mode: Any) -> None:
    rec = Recorded()
    app = rec.app
    seen: list[tuple[str, str, str, int]] = []

    @app.job(queue="q")
    def report(n: int) -> int:
        job = fastq.current_job()
        seen.append((job.id, job.queue, job.name, job.attempt))
        for i in range(1, n + 1):
            job.set_progress(i / n, {"done": i})
        info = app.get_job(job.id)  # what a user reads while it runs
        assert info is not None and info.state == "active"
        assert (info.progress, info.progress_meta) == (1.0, {"done": n})
        return n

    job_id, jobs = mode(app, lambda: report.enqueue(2))
    assert seen == [(job_id, "q", "report", 1)]
    assert jobs.progress[job_id] == [(0.5, {"done": 1}), (1.0, {"done": 2})]
    assert rec.calls == [("before", "report", 1, None), ("after", "report", 1, "done")]
    assert [(r.id, r.attempt, r.outcome, r.returned) for r in jobs.runs] == [(job_id, 1, "done", 2)]
    assert jobs.results == {job_id: 2}
    with pytest.raises(RuntimeError, match="outside a running job"):
        fastq.current_job()  # once it ended


@pytest.mark.parametrize("mode", MODES, ids=["stub", "eager"])
def test_a_job_that_fails_twice_then_succeeds_runs_three_times(mode: Any) -> None:
    rec = Recorded()
    app = rec.app
    attempts: list[int] = []

    # a backoff of a minute at least: not slept
    @app.job(queue="q", retries=3, backoff_s=60, result_ttl_s=60)
    def flaky(x: int) -> int:
        attempts.append(fastq.current_job().attempt)
        if len(attempts) < 3:
            raise ConnectionError(f"try {len(attempts)}")
        return x * 2

    def read_back(job_id: str, jobs: QueuedJobs) -> None:
        assert app.result(job_id) == 42  # kept, as a worker keeps it
        info = app.get_job(job_id)
        assert info is not None
        assert (info.state, info.attempts, info.result) == ("done", 3, 42)

    started = time.monotonic()
    job_id, jobs = mode(app, lambda: flaky.enqueue(21), read_back)
    assert time.monotonic() - started < 10
    assert attempts == [1, 2, 3]
    assert [(r.attempt, r.outcome, r.reason) for r in jobs.runs] == [
        (1, "retried", "ConnectionError: try 1"),
        (2, "retried", "ConnectionError: try 2"),
        (3, "done", None),
    ]
    assert rec.calls == [
        ("before", "flaky", 1, None),
        ("failure", "flaky", 1, "retried"),
        ("after", "flaky", 1, "retried"),
        ("before", "flaky", 2, None),
        ("failure", "flaky", 2, "retried"),
        ("after", "flaky", 2, "retried"),
        ("before", "flaky", 3, None),
        ("after", "flaky", 3, "done"),
    ]


def test_a_job_out_of_retries_is_dead_and_its_error_propagates() -> None:
    rec = Recorded()
    app = rec.app
    runs: list[int] = []

    @app.job(queue="q", retries=2, result_ttl_s=60)
    def broken_link() -> None:
        runs.append(fastq.current_job().attempt)
        raise ValueError("still down")

    with app.stub() as jobs:
        job_id = broken_link.enqueue()
        with pytest.raises(ValueError, match="still down"):
            jobs.run()
        assert runs == [1, 2, 3]
        assert [r.outcome for r in jobs.runs] == ["retried", "retried", "dead"]
        info = app.get_job(job_id)
        assert info is not None
        assert (info.state, info.attempts, info.last_error) == ("dead", 3, "ValueError: still down")
        with pytest.raises(fastq.JobFailed, match="still down"):
            app.result(job_id)
    assert rec.calls[-2:] == [
        ("failure", "broken_link", 3, "dead"),
        ("after", "broken_link", 3, "dead"),
    ]
    with app.eager(), pytest.raises(ValueError, match="still down"):
        broken_link.enqueue()  # at the enqueue, once it is dead
    assert runs == [1, 2, 3, 1, 2, 3]


def test_retry_and_fail_returned_follow_the_policy() -> None:
    app = fastq.App(NO_REDIS)
    attempts: list[int] = []

    @app.job(queue="q", retries=1)
    def again() -> Any:
        attempts.append(fastq.current_job().attempt)
        return fastq.Retry(delay_s=3600)  # not slept either

    @app.job(queue="q", retries=5)
    def give_up() -> Any:
        return fastq.Fail("no such user")  # dead at once, whatever the retries

    with app.stub() as jobs:
        again.enqueue()
        give_up.enqueue()
        results = jobs.run()  # returned, not raised: nothing propagates
    assert attempts == [1, 2]
    assert isinstance(results[0], fastq.Retry) and isinstance(results[1], fastq.Fail)
    assert [(r.name, r.outcome) for r in jobs.runs] == [
        ("again", "retried"),
        ("again", "dead"),
        ("give_up", "dead"),
    ]
    assert jobs.runs[-1].reason == "Fail: no such user"


def test_results_are_read_back_as_from_a_worker() -> None:
    app = fastq.App(NO_REDIS)

    @app.job(queue="q", result_ttl_s=60)
    def pair(a: int) -> tuple[int, int]:
        return (a, a + 1)

    @app.job(queue="q")
    def dropped() -> int:
        return 7

    @app.job(queue="q", result_ttl_s=60, retries=0)
    def unkeepable() -> Any:
        return {1, 2}  # JSON holds no set: the run fails, as in a worker

    with app.stub() as jobs:
        kept, not_kept, bad = pair.enqueue(1), dropped.enqueue(), unkeepable.enqueue()
        with pytest.raises(fastq.ResultTimeout, match="has not run"):
            app.result(kept)
        assert jobs.run()[:2] == [(1, 2), 7]  # run() returns what each returned
        assert app.result(kept) == [1, 2]  # through JSON: a list
        with pytest.raises(fastq.NoResult):
            app.result(not_kept)  # no result_ttl_s: dropped, as by a worker
        assert jobs.results[not_kept] == 7
        with pytest.raises(fastq.JobFailed, match="ResultNotSerializable"):
            app.result(bad)
        with pytest.raises(fastq.NoResult):
            app.result("nope")


def test_an_async_job_and_a_job_enqueued_by_a_job_have_their_own_context() -> None:
    rec = Recorded()
    app = rec.app
    seen: list[tuple[str, str]] = []

    @app.job(queue="q")
    async def inner() -> None:
        seen.append(("inner", fastq.current_job().name))

    @app.job(queue="q")
    def outer() -> None:
        inner.enqueue()  # in an eager app: runs here, in its own context
        seen.append(("outer", fastq.current_job().name))

    with app.eager():
        outer.enqueue()
    assert seen == [("inner", "inner"), ("outer", "outer")]
    assert rec.calls == [
        ("before", "outer", 1, None),
        ("before", "inner", 1, None),
        ("after", "inner", 1, "done"),
        ("after", "outer", 1, "done"),
    ]


def test_the_app_is_itself_again_after_the_block() -> None:
    app = fastq.App(NO_REDIS)
    parts = (app.producer, app.batch_book, app.job_admin)
    with app.stub():
        assert app.producer.transport.in_memory
    assert (app.producer, app.batch_book, app.job_admin) == parts
    assert not app.producer.transport.in_memory
    with pytest.raises(fastq.RedisUnavailable):
        app.get_job("x")


def test_a_job_of_a_name_the_app_lacks_is_refused_where_it_runs() -> None:
    app = fastq.App(NO_REDIS)

    @app.job(queue="q")
    def known() -> None: ...

    with app.stub() as jobs:
        with app.batch() as batch:
            app.enqueue("unknown", queue="q")  # another service's job, perhaps
        with pytest.raises(LookupError, match="'unknown' is not registered"):
            jobs.run()
        status = app.batch_status(batch.id)
        assert status is not None and (status.state, status.dead) == ("ended", 1)
