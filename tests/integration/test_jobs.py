"""Job outcomes end to end, with an in-process burst worker on a real redis-server."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import pytest
import redis

import fastq
from fastq.shm.cpuslots import CpuSlots
from fastq.worker.worker import HardStop
from tests.support.workers import drain, drain_in_thread


def test_enqueue_many_runs_each_job_once(app: fastq.App) -> None:
    seen: dict[int, int] = {}

    @app.job(queue="mail")
    def send(i: int, subject: str) -> None:
        seen[i] = seen.get(i, 0) + 1

    ids = send.enqueue_many([(i, "hi") for i in range(2500)])
    assert len(set(ids)) == 2500
    assert app.stats("mail")["ready"] == 2500
    drain(app, ["mail"], batch_size=100)
    assert seen == {i: 1 for i in range(2500)}
    stats = app.stats("mail")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["enqueued"]) == (
        2500,
        0,
        0,
        2500,
    )


def test_kwargs_calls_and_single_enqueue(app: fastq.App) -> None:
    got: list[tuple[str, str]] = []

    @app.job(queue="mail")
    def send(to: str, subject: str = "none") -> None:
        got.append((to, subject))

    send.enqueue("a@x", subject="s1")
    send.enqueue_many([{"to": "b@x"}, ("c@x", "s3")])
    app.enqueue("send", args=["d@x"], kwargs={"subject": "s4"})
    drain(app, ["mail"])
    assert got == [("a@x", "s1"), ("b@x", "none"), ("c@x", "s3"), ("d@x", "s4")]


def test_fails_twice_then_succeeds_with_backoff(app: fastq.App) -> None:
    attempts_seen: list[float] = []

    @app.job(queue="q", retries=5, backoff_s=0.3, jitter=0.0)
    def flaky() -> None:
        attempts_seen.append(time.monotonic())
        if len(attempts_seen) < 3:
            raise ConnectionResetError("smtp went away")

    job_id = flaky.enqueue()
    worker, thread = drain_in_thread(app, ["q"])
    # the first failure parks the job in the scheduled set for its backoff
    deadline = time.monotonic() + 5
    info = app.get_job(job_id)
    while (info is None or info.state != "scheduled") and time.monotonic() < deadline:
        time.sleep(0.01)
        info = app.get_job(job_id)
    assert info is not None and info.state == "scheduled"
    assert info.due_at is not None and info.failed_at is not None
    assert 0.25 <= info.due_at - info.failed_at <= 0.5
    assert info.last_error == "ConnectionResetError: smtp went away"
    thread.join(10)
    assert not thread.is_alive()
    assert len(attempts_seen) == 3
    gap1 = attempts_seen[1] - attempts_seen[0]
    gap2 = attempts_seen[2] - attempts_seen[1]
    assert gap1 >= 0.29 and gap2 >= 0.59  # 0.3 s, then doubled
    stats = app.stats("q")
    assert (stats["processed"], stats["retried"], stats["failed"], stats["dead"]) == (1, 2, 2, 0)
    assert getattr(app.get_job(job_id), "state", None) == "done"  # its record


def test_a_running_job_shows_its_worker_and_lease(app: fastq.App) -> None:
    started, release = threading.Event(), threading.Event()

    @app.job(queue="q")
    def slow() -> None:
        started.set()
        release.wait(10)

    job_id = slow.enqueue()
    waiting_id = slow.enqueue()
    worker, thread = drain_in_thread(app, ["q"], lease_s=30, batch_size=1)
    assert started.wait(10)
    info = app.get_job(job_id)
    assert info is not None and info.state == "active"
    assert info.worker == worker.worker_id
    assert info.lease_until is not None and 20 < info.lease_until - time.time() <= 30
    waiting = app.get_job(waiting_id)
    assert waiting is not None and (waiting.state, waiting.worker) == ("queued", None)
    assert (app.stats("q")["inflight"], app.stats("q")["ready"]) == (1, 1)
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert app.stats("q")["inflight"] == 0 and getattr(app.get_job(job_id), "state", None) == "done"


def test_retries_exhausted_go_dead_with_traceback(app: fastq.App) -> None:
    calls = []

    @app.job(queue="q", retries=2, backoff_s=0)
    def doomed(x: int) -> None:
        calls.append(x)
        raise ValueError(f"boom {x}")

    job_id = doomed.enqueue(7)
    drain(app, ["q"])
    assert calls == [7, 7, 7]
    info = app.get_job(job_id)
    assert info is not None
    assert info.state == "dead"
    assert info.attempts == 3
    assert info.last_error == "ValueError: boom 7"
    assert info.traceback is not None and 'raise ValueError(f"boom {x}")' in info.traceback
    assert info.args == [7]
    stats = app.stats("q")
    assert (stats["dead"], stats["failed"], stats["retried"], stats["processed"]) == (1, 3, 2, 0)


def test_exception_outside_retry_on_fails_at_once(app: fastq.App) -> None:
    @app.job(queue="q", retries=5, retry_on=(ConnectionError,), backoff_s=0)
    def strict() -> None:
        raise KeyError("no such template")

    job_id = strict.enqueue()
    drain(app, ["q"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead" and info.attempts == 1


def test_retry_and_fail_outcomes(app: fastq.App, caplog: pytest.LogCaptureFixture) -> None:
    runs: dict[str, int] = {}

    @app.job(queue="q", retries=3, backoff_s=0)
    def outcome(kind: str) -> object:
        runs[kind] = runs.get(kind, 0) + 1
        if kind == "retry-returned" and runs[kind] == 1:
            return fastq.Retry(delay_s=0)
        if kind == "retry-raised" and runs[kind] == 1:
            raise fastq.Retry(delay_s=0.05)
        if kind == "retry-forever":
            raise fastq.Retry(delay_s=0)
        if kind == "fail-raised":
            raise fastq.Fail("address bounced")
        if kind == "fail-returned":
            return fastq.Fail("unsubscribed")
        return "a return value is fine"

    ids = {
        kind: outcome.enqueue(kind)
        for kind in (
            "retry-returned",
            "retry-raised",
            "retry-forever",
            "fail-raised",
            "fail-returned",
            "ok",
        )
    }
    with caplog.at_level(logging.ERROR, logger="fastq.worker"):
        drain(app, ["q"])
    assert runs == {
        "retry-returned": 2,
        "retry-raised": 2,
        "retry-forever": 4,  # 1 + retries
        "fail-raised": 1,
        "fail-returned": 1,
        "ok": 1,
    }
    dead = {
        kind: app.get_job(ids[kind]) for kind in ("retry-forever", "fail-raised", "fail-returned")
    }
    assert (
        dead["fail-raised"] is not None
        and dead["fail-raised"].last_error == "Fail: address bounced"
    )
    assert (
        dead["fail-returned"] is not None
        and dead["fail-returned"].last_error == "Fail: unsubscribed"
    )
    assert dead["retry-forever"] is not None and dead["retry-forever"].state == "dead"
    assert "retries exhausted" in (dead["retry-forever"].last_error or "")
    stats = app.stats("q")
    assert (stats["processed"], stats["dead"]) == (3, 3)
    # every death is logged at ERROR, naming the job and why
    deaths = sorted(r.getMessage() for r in caplog.records if " is dead: " in r.getMessage())
    assert deaths == sorted(
        [
            f"job outcome {ids['fail-raised']} is dead: Fail: address bounced",
            f"job outcome {ids['fail-returned']} is dead: Fail: unsubscribed",
            f"job outcome {ids['retry-forever']} is dead: "
            "Retry requested after 4 attempts: retries exhausted",
        ]
    )


def test_custom_job_id_is_idempotent(app: fastq.App) -> None:
    runs: list[str] = []

    @app.job(queue="q")
    def once(x: str) -> None:
        runs.append(x)

    assert app.enqueue("once", ["a"], job_id="order-42") == "order-42"
    assert app.enqueue("once", ["b"], job_id="order-42") == "order-42"
    once.enqueue_many([("c",), ("d",)], job_ids=["order-42", "order-43"])
    assert app.stats("q")["enqueued"] == 2
    drain(app, ["q"])
    assert runs == ["a", "d"]


def test_priority_order_fifo_within_priority(app: fastq.App) -> None:
    order: list[str] = []

    @app.job(queue="q")
    def record(tag: str) -> None:
        order.append(tag)

    for tag, prio in [("n1", 0), ("p5a", 5), ("low", -1), ("p5b", 5), ("p10", 10), ("n2", 0)]:
        app.enqueue("record", [tag], priority=prio)
    record.enqueue_many([("p5c",), ("p5d",)], priority=5)
    drain(app, ["q"], batch_size=3)
    assert order == ["p10", "p5a", "p5b", "p5c", "p5d", "n1", "n2", "low"]


def test_queues_are_taken_in_the_order_given(app: fastq.App) -> None:
    order: list[str] = []

    @app.job(queue="low")
    def low(i: int) -> None:
        order.append(f"low{i}")

    @app.job(queue="high")
    def high(i: int) -> None:
        order.append(f"high{i}")

    low.enqueue_many([(i,) for i in range(3)])
    high.enqueue_many([(i,) for i in range(3)])
    drain(app, ["high", "low"], batch_size=2)
    assert order == ["high0", "high1", "high2", "low0", "low1", "low2"]


def test_graceful_stop_hands_back_unstarted_jobs_in_order(app: fastq.App) -> None:
    ran: list[int] = []
    holder: dict[str, fastq.worker.worker.Worker] = {}

    @app.job(queue="q")
    def step(i: int) -> None:
        ran.append(i)
        if i == 2:
            holder["w"].stop()

    step.enqueue_many([(i,) for i in range(10)])
    worker = fastq.worker.worker.Worker(app, ["q"], batch_size=10, burst=True, handle_signals=False)
    holder["w"] = worker
    worker.run()
    assert ran == [0, 1, 2]
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (3, 7, 0)
    drain(app, ["q"])
    assert ran == list(range(10))  # the rest came back at the front, in order
    # handing back unstarted jobs took back their claim: each ran with attempt 1
    assert app.stats("q")["processed"] == 10


def test_scripts_reload_after_script_flush(app: fastq.App, r: redis.Redis) -> None:
    done: list[int] = []

    @app.job(queue="q")
    def work(i: int) -> None:
        done.append(i)
        if i == 5:
            r.script_flush()

    work.enqueue_many([(i,) for i in range(10)])
    r.script_flush()
    work.enqueue_many([(i,) for i in range(10, 20)])
    drain(app, ["q"], batch_size=4)
    assert sorted(done) == list(range(20))
    assert app.stats("q")["processed"] == 20


def test_an_idle_worker_wakes_on_enqueue_instead_of_polling(app: fastq.App) -> None:
    ran_at: list[float] = []

    @app.job(queue="q")
    def ping() -> None:
        ran_at.append(time.monotonic())

    # a 30 s idle wait: only the wake-up token can make it run promptly
    worker, thread = drain_in_thread(app, ["q"], burst=False, idle_timeout_s=30)
    time.sleep(0.5)
    enqueued_at = time.monotonic()
    ping.enqueue()
    deadline = enqueued_at + 5
    while not ran_at and time.monotonic() < deadline:
        time.sleep(0.005)
    assert ran_at and ran_at[0] - enqueued_at < 0.5
    worker.stop()
    ping.enqueue()  # wakes the worker so it sees the stop
    thread.join(10)
    assert not thread.is_alive()


def test_an_idle_worker_sleeps_until_the_next_retry_is_due(app: fastq.App) -> None:
    ran_at: list[float] = []

    @app.job(queue="q", retries=1, backoff_s=0.4, jitter=0.0)
    def once_more() -> None:
        ran_at.append(time.monotonic())
        if len(ran_at) == 1:
            raise RuntimeError("first attempt fails")

    once_more.enqueue()
    worker, thread = drain_in_thread(app, ["q"], idle_timeout_s=30)
    thread.join(10)
    assert not thread.is_alive() and len(ran_at) == 2
    assert 0.39 <= ran_at[1] - ran_at[0] < 1.0  # not the 30 s idle timeout


def test_batches_are_told_apart_as_cpu_bound_or_waiting(app: fastq.App) -> None:
    @app.job(queue="spin")
    def spin() -> None:
        # 10 ms of CPU, not of the clock: on a crowded machine a spin by the clock got
        # little CPU while the round trips to a Redis also waiting its turn blocked
        # longer (a CPU-bound batch read as waiting, once, under CI's load)
        deadline = time.thread_time() + 0.01
        while time.thread_time() < deadline:
            pass

    @app.job(queue="wait")
    def wait() -> None:
        time.sleep(0.01)

    spin.enqueue_many([()] * 5)
    wait.enqueue_many([()] * 5)
    # measured where it matters: in a pool, with CPU slots to share
    assert drain(app, ["spin"], cpu_slots=CpuSlots(2)).governor.cpu_bound is True
    assert drain(app, ["wait"], cpu_slots=CpuSlots(2)).governor.cpu_bound is False


def test_a_hard_stop_hands_the_job_in_hand_back_without_a_stall(app: fastq.App) -> None:
    calls: list[int] = []

    @app.job(queue="q")
    def step(i: int) -> None:
        calls.append(i)
        if len(calls) == 1:
            raise HardStop("SIGINT")  # what a second stop signal raises mid-job

    step.enqueue_many([(0,), (1,), (2,)])
    with contextlib.suppress(HardStop):
        drain(app, ["q"], batch_size=10)
    stats = app.stats("q")
    assert (stats["interrupted"], stats["stalled"], stats["ready"]) == (1, 0, 3)
    drain(app, ["q"], batch_size=10)
    assert calls == [0, 0, 1, 2]  # the interrupted job first, then the rest in order


def test_a_workers_own_hand_back_that_buries_a_job_logs_it(
    redis_server: object, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = fastq.App(redis_server.url, namespace=namespace, max_stalls=0)  # type: ignore[attr-defined]

    @app.job(queue="q")
    def quits() -> None:
        raise SystemExit(3)  # mid-job: handed back as stalled by the worker itself

    job_id = quits.enqueue()
    with caplog.at_level(logging.ERROR, logger="fastq.worker"), pytest.raises(SystemExit):
        drain(app, ["q"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead"
    assert f"job {job_id} of queue q is dead: stalled 1 times" in caplog.text
    app.close()
