"""RQ's side: ``rq worker --burst --url URL noop`` x2 runs it."""

from __future__ import annotations

import time

import redis
from counting import record, report, url
from rq import Queue


def noop(i: int) -> None:
    record(i)


def enqueue(n: int) -> None:
    queue = Queue("noop", connection=redis.Redis.from_url(url()))
    t0 = time.perf_counter()
    for start in range(0, n, 1000):  # enqueue_many pipelines each call; 1,000 a call
        jobs = [
            Queue.prepare_data(noop, (i,), result_ttl=0) for i in range(start, min(n, start + 1000))
        ]
        queue.enqueue_many(jobs)
    report(time.perf_counter() - t0, n)
