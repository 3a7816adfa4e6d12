"""arq's side: ``arq arq_tasks.WorkerSettings`` x2 runs it (one asyncio worker per
process, ``max_jobs`` 10 by default, or ``PEERBENCH_IO_CONCURRENCY``)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from counting import acount, arecord, jobs, report, url

CHUNK = 1000  # enqueue_job calls in flight at once


async def noop(ctx: dict[str, Any], i: int) -> None:
    await arecord(i)


async def io(ctx: dict[str, Any], i: int, ms: float) -> None:
    await asyncio.sleep(ms / 1000)
    await arecord(i)


async def send_email(ctx: dict[str, Any], to: str, subject: str, n: int) -> None:
    await acount()


class WorkerSettings:
    functions = [noop, io, send_email]
    redis_settings = RedisSettings.from_dsn(url())
    queue_name = "noop"
    max_jobs = int(os.environ.get("PEERBENCH_IO_CONCURRENCY") or 10)
    keep_result = 0  # no result kept, as every peer here is set up


async def _enqueue(n: int, kind: str) -> float:
    pool = await create_pool(WorkerSettings.redis_settings, default_queue_name="noop")
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):  # no bulk API: enqueue_job calls, gathered
        await asyncio.gather(
            *(
                pool.enqueue_job(name, *args)
                for name, args in jobs(kind, start, min(n, start + CHUNK))
            )
        )
    elapsed = time.perf_counter() - t0
    await pool.aclose()
    return elapsed


def enqueue(n: int, kind: str = "noop") -> None:
    report(asyncio.run(_enqueue(n, kind)), n)
