"""SAQ's side: ``saq saq_tasks.settings --workers 2`` runs it (``concurrency`` 10 per
worker process, SAQ's default)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from counting import arecord, report, url
from saq import Queue

CHUNK = 1000  # enqueue calls in flight at once

queue = Queue.from_url(url(), name="noop")


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    await arecord(i)


settings = {"queue": queue, "functions": [noop], "concurrency": 10}


async def _enqueue(n: int) -> float:
    await queue.connect()
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):  # no bulk API: enqueue calls, gathered
        await asyncio.gather(
            *(queue.enqueue("noop", i=i) for i in range(start, min(n, start + CHUNK)))
        )
    elapsed = time.perf_counter() - t0
    await queue.disconnect()
    return elapsed


def enqueue(n: int) -> None:
    report(asyncio.run(_enqueue(n)), n)
