"""Sync jobs run by a worker in a pool of threads (``--threads N``, fastq.runners.threads)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import fastq
from fastq.worker.worker import Worker
from tests.support.workers import drain


def test_thread_jobs_drain_exactly_once_with_many_in_flight(app: fastq.App) -> None:
    ran: Counter[int] = Counter()
    lock = threading.Lock()
    most = [0, 0]  # in flight now, at most

    @app.job(queue="q")
    def send(i: int) -> None:
        with lock:
            most[0] += 1
            most[1] = max(most)
        time.sleep(0.005)
        with lock:
            most[0] -= 1
            ran[i] += 1

    send.enqueue_many([(i,) for i in range(600)])
    worker = drain(app, ["q"], threads=20)
    assert ran == Counter(range(600))
    assert worker.jobs_run == 600
    assert 1 < most[1] <= 20  # many at once, never more than the threads
    assert app.stats("q")["ready"] == 0 and app.stats("q")["inflight"] == 0


def test_current_job_and_progress_are_per_thread(app: fastq.App) -> None:
    seen: dict[str, tuple[int, str]] = {}

    @app.job(queue="q")
    def who(i: int) -> None:
        before = fastq.current_job().id
        time.sleep(0.002 * (i % 5))  # the others run meanwhile
        job = fastq.current_job()
        job.set_progress(0.5, {"i": i})
        assert job.id == before
        seen[job.id] = (i, job.name)

    ids = [who.enqueue(i) for i in range(40)]
    drain(app, ["q"], threads=8)
    assert seen == {job_id: (i, "who") for i, job_id in enumerate(ids)}
    assert app.redis.exists(app.keys("q").progress) == 0  # each report gone with its job


def test_results_and_failures_follow_the_job_policy(app: fastq.App) -> None:
    @app.job(queue="q", result_ttl_s=60)
    def add(a: int, b: int) -> int:
        return a + b

    @app.job(queue="q", retries=1, backoff_s=0.01)
    def fails() -> None:
        raise ValueError("SMTP said no")

    job_id = add.enqueue(2, 3)
    bad = fails.enqueue()
    drain(app, ["q"], threads=4)
    assert app.result(job_id, timeout_s=1) == 5
    buried = app.get_job(bad)
    assert buried is not None and buried.state == "dead" and buried.attempts == 2
    assert "SMTP said no" in (buried.last_error or "")


def test_an_app_mixes_async_jobs_on_the_loop_and_sync_jobs_in_threads(app: fastq.App) -> None:
    ran: Counter[str] = Counter()
    names: set[str] = set()

    @app.job(queue="q")
    async def io(i: int) -> None:
        await asyncio.sleep(0.001)
        ran["io"] += 1

    @app.job(queue="q")
    def cpu(i: int) -> None:
        names.add(threading.current_thread().name)
        time.sleep(0.001)
        ran["cpu"] += 1

    for i in range(150):
        io.enqueue(i)
        cpu.enqueue(i)
    worker = drain(app, ["q"], async_jobs=20, threads=4)
    assert ran == {"io": 150, "cpu": 150}
    assert worker.jobs_run == 300
    assert names and all(name.startswith("fastq-job-") for name in names)


def test_a_job_past_its_timeout_is_settled_and_its_worker_recycled(app: fastq.App) -> None:
    release = threading.Event()
    ran: list[int] = []

    @app.job(queue="q", timeout_s=0.2, retries=0)
    def hangs() -> str:
        release.wait(30)  # a thread cannot be stopped: it runs on
        return "late"

    @app.job(queue="q")
    def quick(i: int) -> None:
        time.sleep(0.01)
        ran.append(i)

    stuck = hangs.enqueue()
    for i in range(5):
        quick.enqueue(i)
    worker = Worker(app, ["q"], threads=4, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(10)
    release.set()
    assert not thread.is_alive(), "the worker did not recycle itself"
    assert worker.stopping
    info = app.get_job(stuck)
    assert info is not None and info.state == "dead"  # retries=0: dead at its timeout
    assert "timeout_s=0.2" in (info.last_error or "")
    stats = app.stats("q")
    assert stats["inflight"] == 0
    # the others it held finished; what it had not claimed is left for the next worker
    assert stats["processed"] == len(ran) and stats["ready"] == 5 - len(ran)


def test_a_timed_out_thread_job_retries_by_its_policy(app: fastq.App) -> None:
    attempts: list[int] = []
    release = threading.Event()

    @app.job(queue="q", timeout_s=0.2, retries=1, backoff_s=0.05)
    def hangs_once() -> str:
        attempt = fastq.current_job().attempt
        attempts.append(attempt)
        if attempt == 1:
            release.wait(30)
        return "ok"

    job_id = hangs_once.enqueue()
    drain(app, ["q"], threads=2)  # recycled after the timeout
    assert attempts == [1]
    info = app.get_job(job_id)
    assert info is not None and info.state == "scheduled" and info.attempts == 1
    drain(app, ["q"], threads=2)  # the fresh worker a pool would fork
    release.set()
    assert attempts == [1, 2]
    assert getattr(app.get_job(job_id), "state", None) == "done"  # done: acked and gone
    assert app.stats("q")["dead"] == 0


def test_a_graceful_stop_waits_for_the_threads(app: fastq.App) -> None:
    done: list[int] = []

    @app.job(queue="q")
    def takes(i: int) -> None:
        time.sleep(0.3)
        done.append(i)

    for i in range(8):
        takes.enqueue(i)
    worker = Worker(app, ["q"], threads=8, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while worker.slots.in_flight < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(10)
    assert sorted(done) == list(range(8))
    assert app.stats("q")["ready"] == 0 and app.stats("q")["inflight"] == 0


def test_at_most_once_jobs_stay_in_the_workers_thread(app: fastq.App) -> None:
    names: Counter[str] = Counter()

    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        names["once " + threading.current_thread().name] += 1

    @app.job(queue="q")
    def many(i: int) -> None:
        names["many " + threading.current_thread().name.rstrip("0123456789")] += 1

    for i in range(20):
        once.enqueue(i)
        many.enqueue(i)
    drain(app, ["q"], threads=4)
    assert names == {f"once {threading.main_thread().name}": 20, "many fastq-job-": 20}
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (40, 0, 0)
