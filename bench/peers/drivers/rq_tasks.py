"""RQ's side: ``rq worker --burst --url URL noop`` x2 runs it."""

from __future__ import annotations

import time

import redis
from counting import count, jobs, record, report, url
from rq import Queue

CHUNK = 1000  # jobs per enqueue_many call (one pipeline each)


def noop(i: int) -> None:
    record(i)


def io(i: int, ms: float) -> None:
    time.sleep(ms / 1000)
    record(i)


def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    queue = Queue("noop", connection=redis.Redis.from_url(url()))
    funcs = {"noop": noop, "io": io, "send_email": send_email}
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):
        queue.enqueue_many(
            [
                Queue.prepare_data(funcs[name], args, result_ttl=0)
                for name, args in jobs(kind, start, min(n, start + CHUNK))
            ]
        )
    report(time.perf_counter() - t0, n)
