"""Strict priority across a worker's queues (``-q a,b``): an earlier queue's jobs
run before a later queue's, even when they arrive while the later one is being
drained, and the later queue is still drained fully, each job once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import fastq
from fastq.worker.sizer import BatchSizer
from fastq.worker.worker import Worker
from tests.support.workers import drain


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


class BatchLog(BatchSizer):
    """A queue's sizer, noting in ``sizes`` (shared by the worker's queues) how many
    jobs each batch that ran held, in order."""

    def __init__(self, max_n: int, target_batch_s: float, sizes: list[int]) -> None:
        super().__init__(max_n, target_batch_s)
        self.sizes = sizes

    def ran(self, batch_s: float, jobs: int, rtt_s: float = 0.0) -> None:
        self.sizes.append(jobs)
        super().ran(batch_s, jobs, rtt_s)


def drain_logging_batches(
    app: fastq.App, queues: list[str], batch_size: int, order: list[Any]
) -> list[list[Any]]:
    """Drain ``queues`` with a burst worker whose jobs append to ``order`` (an item
    per job, its queue first); returns ``order`` cut into the batches that ran,
    each of one queue and at most what the sizer allows."""
    worker = Worker(app, queues, batch_size=batch_size, burst=True, handle_signals=False)
    sizes: list[int] = []
    by_queue = worker.sizers.by_queue
    for queue, sizer in by_queue.items():
        by_queue[queue] = BatchLog(sizer.max_n, sizer.target_batch_s, sizes)
    worker.run()
    assert sum(sizes) == len(order)
    batches, at = [], 0
    for size in sizes:
        batches.append(order[at : at + size])
        at += size
    for batch in batches:
        assert len({job[0] for job in batch}) == 1, batch  # one queue's
        assert len(batch) <= by_queue[queues[0]].cover_max_n  # 10 x batch_size, 1,000
    return batches


def batch_of(batches: list[list[Any]], job: Any) -> int:
    return next(i for i, batch in enumerate(batches) if job in batch)


def test_work_arriving_in_the_first_queue_starts_after_at_most_two_more_batches(
    app: fastq.App,
) -> None:
    """Quick jobs, so the worker claims ahead: a job of ``b`` queues work in ``a``;
    what ``b`` still runs before it is at most the rest of the batch in hand, the
    batch claimed ahead while it ran (before the work came), and the one claimed in
    the round trip whose peek found it. A batch holds at most ``batch_size`` jobs,
    or past it at most 10 ms of quick work (tests/unit/test_sizer.py): that bounds
    the wait by time."""
    batch = 20
    order: list[tuple[str, int]] = []

    @app.job(queue="a")
    def job_a(i: int) -> None:
        order.append(("a", i))

    @app.job(queue="b")
    def job_b(i: int) -> None:
        order.append(("b", i))
        if i in (300, 900):  # twice: once while batches grow, once in the steady state
            job_a.enqueue_many([(i * 10 + k,) for k in range(30)])

    job_b.enqueue_many([(i,) for i in range(1500)])
    batches = drain_logging_batches(app, ["a", "b"], batch, order)
    for trigger in (300, 900):
        at = batch_of(batches, ("b", trigger))
        first_a = batch_of(batches, ("a", trigger * 10))
        assert at < first_a <= at + 3, (trigger, batches[at : first_a + 1])
        # a's 30 jobs, in order, before b goes on (the batch b claimed in the round
        # that claimed a's first jobs may run between two of a's batches)
        a_jobs = [job for job in order if job[0] == "a" and 0 <= job[1] - trigger * 10 < 30]
        assert a_jobs == [("a", trigger * 10 + k) for k in range(30)]
        last_a = batch_of(batches, ("a", trigger * 10 + 29))
        b_between = [b for b in batches[first_a:last_a] if b[0][0] == "b"]
        assert len(b_between) <= 1, b_between
    runs = Counter(order)
    assert set(runs.values()) == {1}  # each job once
    assert sorted(i for q, i in runs if q == "b") == list(range(1500))  # b drained fully
    assert len(runs) == 1560
    assert app.stats("b")["ready"] == app.stats("a")["ready"] == 0


def test_an_earlier_queue_is_claimed_by_its_own_measure_not_the_later_queues(
    app: fastq.App,
) -> None:
    """Batches of ``b``'s quick jobs grow past ``batch_size``; the first claim of
    ``a``'s jobs is of one job all the same (a's are not measured yet: they may be
    slow, and a child holding many slow jobs starves its siblings), and a's batches
    then at most double (a claim written ahead may repeat the last size)."""
    order: list[tuple[str, int]] = []

    @app.job(queue="a")
    def job_a(i: int) -> None:
        order.append(("a", i))

    @app.job(queue="b")
    def job_b(i: int) -> None:
        order.append(("b", i))
        if i == 2500:
            job_a.enqueue_many([(k,) for k in range(40)])

    job_b.enqueue_many([(i,) for i in range(3000)])
    batches = drain_logging_batches(app, ["a", "b"], 10, order)
    b_sizes = [len(b) for b in batches if b[0][0] == "b"]
    a_sizes = [len(b) for b in batches if b[0][0] == "a"]
    assert max(b_sizes) > 10  # b's batches grew past batch_size
    assert a_sizes[0] == 1, a_sizes
    for i in range(1, len(a_sizes)):
        assert a_sizes[i] <= 2 * max(a_sizes[:i]), a_sizes
    assert sum(a_sizes) == 40 and len(order) == 3040


def test_work_in_the_last_of_four_queues_is_drained_and_earlier_work_runs_first(
    app: fastq.App,
) -> None:
    order: list[tuple[str, int]] = []

    def make(queue: str) -> fastq.job.JobDef[None]:
        @app.job(queue=queue, name=f"job_{queue}")
        def job(i: int) -> None:
            order.append((queue, i))
            if queue == "d" and i == 500:
                jobs["c"].enqueue_many([(k,) for k in range(10)])

        return job

    jobs = {q: make(q) for q in "abcd"}
    jobs["d"].enqueue_many([(i,) for i in range(2000)])
    batches = drain_logging_batches(app, ["a", "b", "c", "d"], 100, order)
    queues = [job[0] for job in order]
    assert queues.count("d") == 2000 and queues.count("c") == 10
    assert app.stats("d")["processed"] == 2000 and app.stats("d")["ready"] == 0
    at = batch_of(batches, ("d", 500))
    first_c = batch_of(batches, ("c", 0))
    assert at < first_c <= at + 3  # after at most two more batches of d
    last_c = batch_of(batches, ("c", 9))
    # c's batches (sized from c's own jobs: 1, then doubling) in a row, but for at
    # most the batch of d claimed in the round that claimed c's first
    d_between = [b for b in batches[first_c:last_c] if b[0][0] == "d"]
    assert len(d_between) <= 1, [(b[0][0], len(b)) for b in batches[first_c : last_c + 1]]


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
