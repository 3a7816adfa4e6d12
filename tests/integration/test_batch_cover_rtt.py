"""A worker grows its quick batches past batch_size to cover the round trip to
Redis it measures (within 10 times batch_size), on one queue or several: with
several, a grown batch holds at most 10 ms of work, which bounds how long work
arriving in an earlier queue waits (tests/integration/test_queue_priority.py)."""

from __future__ import annotations

from collections import Counter

import fastq
from tests.support.workers import drain


def test_a_worker_of_one_queue_grows_quick_batches_past_batch_size(app: fastq.App) -> None:
    ran: Counter[int] = Counter()

    @app.job(queue="q")
    def quick(i: int) -> None:
        ran[i] += 1

    quick.enqueue_many([(i,) for i in range(5000)])
    worker = drain(app, ["q"], batch_size=10)
    assert ran == Counter(range(5000))  # each once
    assert worker._pump is not None and worker._pump.rtt_s > 0  # measured
    assert 10 < worker.sizers["q"].n <= 100
    assert app.stats("q")["processed"] == 5000 and app.stats("q")["ready"] == 0


def test_a_worker_of_several_queues_grows_them_too(app: fastq.App) -> None:
    ran: Counter[int] = Counter()

    @app.job(queue="q2")
    def quick(i: int) -> None:
        ran[i] += 1

    quick.enqueue_many([(i,) for i in range(5000)])
    worker = drain(app, ["q1", "q2"], batch_size=10)
    assert ran == Counter(range(5000))
    assert worker._pump is not None and worker._pump.rtt_s > 0
    assert 10 < worker.sizers["q2"].n <= 100
    assert worker.sizers["q1"].n == 1  # q1's jobs are still unmeasured: one to start
    assert app.stats("q2")["processed"] == 5000 and app.stats("q2")["ready"] == 0
