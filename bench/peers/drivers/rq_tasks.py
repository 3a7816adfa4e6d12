"""RQ's side: ``rq worker --burst --url URL noop`` x2 runs it."""

from __future__ import annotations

import time

import redis
from counting import MAIL, count, record, report, url
from rq import Queue

CHUNK = 1000  # jobs per enqueue_many call (one pipeline each)


def noop(i: int) -> None:
    record(i)


def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    queue = Queue("noop", connection=redis.Redis.from_url(url()))
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):
        jobs = [
            Queue.prepare_data(noop, (i,), result_ttl=0)
            if kind == "noop"
            else Queue.prepare_data(send_email, MAIL, result_ttl=0)
            for i in range(start, min(n, start + CHUNK))
        ]
        queue.enqueue_many(jobs)
    report(time.perf_counter() - t0, n)
