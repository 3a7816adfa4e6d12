"""``async def`` jobs run by a worker with many in flight (fastq.runners.aio)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest

import fastq
from fastq.worker.worker import Worker
from tests.support.workers import drain


def test_async_jobs_drain_exactly_once_with_many_in_flight(app: fastq.App) -> None:
    ran: Counter[int] = Counter()
    most = [0, 0]  # in flight now, at most

    @app.job(queue="q")
    async def send(i: int) -> None:
        most[0] += 1
        most[1] = max(most)
        await asyncio.sleep(0.01)
        most[0] -= 1
        ran[i] += 1

    send.enqueue_many([(i,) for i in range(1000)])
    worker = drain(app, ["q"], async_jobs=50)
    assert ran == Counter(range(1000))
    assert worker.jobs_run == 1000
    assert 1 < most[1] <= 50  # many at once, never more than the slots
    assert app.stats("q")["ready"] == 0 and app.stats("q")["inflight"] == 0


def test_a_slow_job_does_not_hold_back_the_others(app: fastq.App) -> None:
    release = threading.Event()
    order: list[str] = []

    @app.job(queue="q")
    async def slow() -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)
        order.append("slow")

    @app.job(queue="q")
    async def quick(i: int) -> None:
        order.append(f"quick{i}")
        if i == 99:
            release.set()

    slow.enqueue()
    for i in range(100):  # claimed in later round trips than the slow one
        quick.enqueue(i)
    drain(app, ["q"], async_jobs=4, batch_size=2)
    assert order[-1] == "slow" and len(order) == 101


def test_current_job_is_per_task(app: fastq.App) -> None:
    seen: dict[str, tuple[int, str]] = {}

    @app.job(queue="q")
    async def who(i: int) -> None:
        before = fastq.current_job().id
        await asyncio.sleep(0.005 * (i % 5))  # the others run meanwhile
        job = fastq.current_job()
        job.set_progress(0.5, {"i": i})
        assert job.id == before
        seen[job.id] = (i, job.name)

    ids = [who.enqueue(i) for i in range(40)]
    drain(app, ["q"], async_jobs=40)
    assert seen == {job_id: (i, "who") for i, job_id in enumerate(ids)}
    assert app.redis.exists(app.keys("q").progress) == 0  # each report gone with its job


def test_a_timeout_cancels_the_coroutine_and_the_job_retries(app: fastq.App) -> None:
    attempts: list[int] = []
    cancelled: list[int] = []

    @app.job(queue="q", timeout_s=0.2, retries=1, backoff_s=0.05)
    async def hangs() -> str:
        attempt = fastq.current_job().attempt
        attempts.append(attempt)
        if attempt == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(attempt)
                raise
        return "ok"

    @app.job(queue="q", timeout_s=0.1, retries=0)
    async def always_hangs() -> None:
        await asyncio.sleep(30)

    ok = hangs.enqueue()
    dead = always_hangs.enqueue()
    drain(app, ["q"], async_jobs=10)
    assert attempts == [1, 2] and cancelled == [1]
    assert getattr(app.get_job(ok), "state", None) == "done"  # done: acked and gone
    buried = app.get_job(dead)
    assert buried is not None and buried.state == "dead"
    assert "timeout_s=0.1" in (buried.last_error or "")


@pytest.mark.parametrize("concurrency", [1, 20])
def test_an_app_mixes_sync_and_async_jobs(app: fastq.App, concurrency: int) -> None:
    ran: Counter[str] = Counter()
    threads: set[str] = set()

    @app.job(queue="q")
    async def io(i: int) -> None:
        await asyncio.sleep(0.001)
        ran["io"] += 1

    @app.job(queue="q")
    def cpu(i: int) -> None:
        threads.add(threading.current_thread().name)
        ran["cpu"] += 1

    for i in range(100):
        io.enqueue(i)
        cpu.enqueue(i)
    drain(app, ["q"], async_jobs=concurrency)
    assert ran == {"io": 100, "cpu": 100}
    assert threads == {threading.main_thread().name}  # sync jobs: in the worker's thread


def test_an_async_job_alone_runs_without_concurrency(app: fastq.App) -> None:
    got: list[Any] = []

    @app.job(queue="q", result_ttl_s=60)
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    @app.job(queue="q", retries=0)
    async def fails() -> None:
        raise ValueError("SMTP said no")

    job_id = add.enqueue(2, 3)
    bad = fails.enqueue()
    drain(app, ["q"])  # concurrency 1: still awaited on the worker's event loop
    got.append(app.result(job_id, timeout_s=1))
    assert got == [5]
    buried = app.get_job(bad)
    assert buried is not None and "SMTP said no" in (buried.last_error or "")


def test_a_graceful_stop_waits_for_the_jobs_in_flight(app: fastq.App) -> None:
    done: list[int] = []

    @app.job(queue="q")
    async def takes(i: int) -> None:
        await asyncio.sleep(0.3)
        done.append(i)

    for i in range(10):
        takes.enqueue(i)
    worker = Worker(app, ["q"], async_jobs=10, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while worker.slots.in_flight < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(10)
    assert sorted(done) == list(range(10))
    assert app.stats("q")["ready"] == 0 and app.stats("q")["inflight"] == 0


def test_the_progress_of_async_jobs_is_sent_and_deleted_when_they_end(app: fastq.App) -> None:
    seen: dict[int, tuple[Any, Any]] = {}

    @app.job(queue="q")
    async def reports(i: int) -> None:
        job = fastq.current_job()
        job.set_progress(0.25 * (i + 1), {"i": i})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            info = app.get_job(job.id, queue="q")
            if info is not None and info.progress is not None:
                seen[i] = (info.progress, info.progress_meta)
                return
            await asyncio.sleep(0.05)  # the others report meanwhile

    for i in range(4):
        reports.enqueue(i)
    drain(app, ["q"], async_jobs=4)
    assert seen == {i: (0.25 * (i + 1), {"i": i}) for i in range(4)}
    assert app.redis.exists(app.keys("q").progress) == 0


def test_the_last_jobs_are_acknowledged_without_waiting_for_new_work(app: fastq.App) -> None:
    @app.job(queue="q")
    async def quick(i: int) -> None:
        pass  # done before the empty claim that follows it comes back

    quick.enqueue_many([(i,) for i in range(2000)])
    worker = Worker(app, ["q"], async_jobs=200, idle_timeout_s=8, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 6  # the worker waits 8 s for new work once idle
        while app.stats("q")["processed"] < 2000 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.stats("q")["processed"] == 2000  # not held until the idle wait ends
    finally:
        worker.stop()
        thread.join(20)


def test_async_and_thread_jobs_leave_their_run_time_and_attempts_in_their_records(
    app: fastq.App,
) -> None:
    tries: Counter[str] = Counter()

    @app.job(queue="q", retries=1, backoff_s=0)
    async def fetch() -> None:
        tries["fetch"] += 1
        await asyncio.sleep(0.03)
        if tries["fetch"] == 1:
            raise ValueError("first time")

    @app.job(queue="q")
    def resize() -> None:
        time.sleep(0.03)

    ids = [fetch.enqueue(), resize.enqueue()]
    drain(app, ["q"], async_jobs=4, threads=2)
    infos = [app.get_job(job_id) for job_id in ids]
    assert [(i.state, i.attempts) for i in infos if i] == [("done", 2), ("done", 1)]
    assert all(i is not None and i.run_ms is not None and 30 <= i.run_ms < 5000 for i in infos)
