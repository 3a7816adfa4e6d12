"""taskiq's side: ``taskiq worker taskiq_tasks:broker --workers 2`` runs it, with
taskiq-redis's RedisStreamBroker (a stream and a consumer group: a job is
acknowledged after it ran)."""

from __future__ import annotations

import asyncio
import time

from counting import acount, arecord, jobs, report, url
from taskiq_redis import RedisStreamBroker

CHUNK = 1000  # kiq calls in flight at once

broker = RedisStreamBroker(url=url(), queue_name="noop")


@broker.task(task_name="noop")
async def noop(i: int) -> None:
    await arecord(i)


@broker.task(task_name="io")
async def io(i: int, ms: float) -> None:
    await asyncio.sleep(ms / 1000)
    await arecord(i)


@broker.task(task_name="send_email")
async def send_email(to: str, subject: str, n: int) -> None:
    await acount()


async def _enqueue(n: int, kind: str) -> float:
    tasks = {"noop": noop, "io": io, "send_email": send_email}
    await broker.startup()
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):  # no bulk API: kiq calls, gathered
        await asyncio.gather(
            *(tasks[name].kiq(*args) for name, args in jobs(kind, start, min(n, start + CHUNK)))
        )
    elapsed = time.perf_counter() - t0
    await broker.shutdown()
    return elapsed


def enqueue(n: int, kind: str = "noop") -> None:
    report(asyncio.run(_enqueue(n, kind)), n)
