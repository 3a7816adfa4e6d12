"""streaq's side: ``streaq run streaq_tasks:worker --workers 2`` runs it (``concurrency``
16 per worker process, streaq's default, or ``PEERBENCH_IO_CONCURRENCY``)."""

from __future__ import annotations

import os
import time

import anyio
from counting import acount, arecord, jobs, report, url
from streaq import Worker

CHUNK = 1000  # tasks per enqueue_many (one pipeline)

worker = Worker(
    redis_url=url(),
    queue_name="noop",
    concurrency=int(os.environ.get("PEERBENCH_IO_CONCURRENCY") or 16),
)


@worker.task
async def noop(i: int) -> None:
    await arecord(i)


@worker.task
async def io(i: int, ms: float) -> None:
    await anyio.sleep(ms / 1000)
    await arecord(i)


@worker.task
async def send_email(to: str, subject: str, n: int) -> None:
    await acount()


async def _enqueue(n: int, kind: str) -> float:
    tasks = {"noop": noop, "io": io, "send_email": send_email}
    async with worker:
        t0 = time.perf_counter()
        for start in range(0, n, CHUNK):  # not awaited: enqueue_many sends them pipelined
            await worker.enqueue_many(
                [
                    tasks[name].enqueue(*args)
                    for name, args in jobs(kind, start, min(n, start + CHUNK))
                ]
            )
        return time.perf_counter() - t0


def enqueue(n: int, kind: str = "noop") -> None:
    report(anyio.run(_enqueue, n, kind), n)
