"""Strict priority across a worker's queues (``-q a,b``): an earlier queue's jobs
run before a later queue's, even when they arrive while the later one is being
drained, and the later queue is still drained fully, each job once."""

from __future__ import annotations

import time
from collections import Counter

from conftest import drain

import fastq


def test_a_worker_serves_its_first_queue_first_and_drains_the_second(app: fastq.App) -> None:
    order: list[tuple[str, int]] = []

    @app.job(queue="a")
    def job_a(i: int) -> None:
        order.append(("a", i))

    @app.job(queue="b")
    def job_b(i: int) -> None:
        order.append(("b", i))

    job_b.enqueue_many([(i,) for i in range(1500)])
    job_a.enqueue_many([(i,) for i in range(1500)])
    drain(app, ["a", "b"], batch_size=50)
    assert order == [("a", i) for i in range(1500)] + [("b", i) for i in range(1500)]
    assert app.stats("a")["processed"] == app.stats("b")["processed"] == 1500
    assert app.stats("b")["ready"] == app.stats("b")["inflight"] == 0


def test_work_arriving_in_the_first_queue_overtakes_the_second_within_three_batches(
    app: fastq.App,
) -> None:
    """Quick jobs, so the worker prefetches: a job of ``b`` queues work in ``a``;
    what ``b`` still runs before it is at most the rest of its batch, the batch
    prefetched before the work came, and the one claimed in the round trip whose
    peek found it."""
    batch = 20
    order: list[tuple[str, int]] = []

    @app.job(queue="a")
    def job_a(i: int) -> None:
        order.append(("a", i))

    @app.job(queue="b")
    def job_b(i: int) -> None:
        order.append(("b", i))
        if i in (300, 900):  # twice: once prefetching, once in the steady state after
            job_a.enqueue_many([(i * 10 + k,) for k in range(30)])

    job_b.enqueue_many([(i,) for i in range(1500)])
    drain(app, ["a", "b"], batch_size=batch)
    for trigger in (300, 900):
        at = order.index(("b", trigger))
        first_a = order.index(("a", trigger * 10))
        assert 0 < first_a - at <= 3 * batch, (trigger, order[at : first_a + 1])
        # a's 30 jobs, in order, before b goes on (a batch b claimed in the round
        # that found a's first jobs may run between two of a's batches)
        a_jobs = [job for job in order[first_a:] if job[0] == "a"][:30]
        assert a_jobs == [("a", trigger * 10 + k) for k in range(30)]
        last_a = order.index(("a", trigger * 10 + 29))
        b_between = [job for job in order[first_a:last_a] if job[0] == "b"]
        assert len(b_between) <= batch
    runs = Counter(order)
    assert set(runs.values()) == {1}  # each job once
    assert sorted(i for q, i in runs if q == "b") == list(range(1500))  # b drained fully
    assert len(runs) == 1560
    assert app.stats("b")["ready"] == app.stats("a")["ready"] == 0


def test_work_in_the_last_of_four_queues_is_drained_and_earlier_work_runs_first(
    app: fastq.App,
) -> None:
    order: list[str] = []

    def make(queue: str) -> fastq.job.JobDef[None]:
        @app.job(queue=queue, name=f"job_{queue}")
        def job(i: int) -> None:
            order.append(queue)
            if queue == "d" and i == 500:
                jobs["c"].enqueue_many([(k,) for k in range(10)])

        return job

    jobs = {q: make(q) for q in "abcd"}
    jobs["d"].enqueue_many([(i,) for i in range(2000)])
    drain(app, ["a", "b", "c", "d"], batch_size=100)
    assert order.count("d") == 2000 and order.count("c") == 10
    assert app.stats("d")["processed"] == 2000 and app.stats("d")["ready"] == 0
    first_c = order.index("c")
    last_c = len(order) - 1 - order[::-1].index("c")
    assert first_c <= 501 + 3 * 100  # within three batches of d after the trigger
    assert order[first_c:last_c].count("d") <= 100  # at most the batch of d's round


def test_a_job_falling_due_in_the_first_queue_is_run_before_the_second_is_drained(
    app: fastq.App,
) -> None:
    """No reaper promotes it here: the worker's look at ``a`` between batches of
    ``b`` sees a scheduled job fall due, and claims ``a`` (which promotes it)."""
    order: list[str] = []

    @app.job(queue="a")
    def job_a() -> None:
        order.append("a")

    @app.job(queue="b")
    def job_b(i: int) -> None:
        order.append("b")
        if i == 10:
            job_a.enqueue_with(delay_s=0.05)()
        time.sleep(0.0005)  # b lasts well past a's due time: ~2,000 jobs of 0.5 ms

    job_b.enqueue_many([(i,) for i in range(2000)])
    drain(app, ["a", "b"], batch_size=20)
    assert order.count("a") == 1 and order.count("b") == 2000
    assert order.index("a") < len(order) - 1  # not left until b was empty
