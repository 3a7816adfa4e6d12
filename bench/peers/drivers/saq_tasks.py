"""SAQ's side: ``saq saq_tasks.settings --workers 2`` runs it (``concurrency`` 10 per
worker process, SAQ's default, or ``PEERBENCH_IO_CONCURRENCY``)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from counting import acount, arecord, jobs, report, url
from saq import Queue

CHUNK = 1000  # enqueue calls in flight at once
# SAQ passes a job's arguments by keyword
PARAMS = {"noop": ("i",), "io": ("i", "ms"), "send_email": ("to", "subject", "n")}

queue = Queue.from_url(url(), name="noop")


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    await arecord(i)


async def io(ctx: dict[str, Any], *, i: int, ms: float) -> None:
    await asyncio.sleep(ms / 1000)
    await arecord(i)


async def send_email(ctx: dict[str, Any], *, to: str, subject: str, n: int) -> None:
    await acount()


settings = {
    "queue": queue,
    "functions": [noop, io, send_email],
    "concurrency": int(os.environ.get("PEERBENCH_IO_CONCURRENCY") or 10),
}


async def _enqueue(n: int, kind: str) -> float:
    await queue.connect()
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):  # no bulk API: enqueue calls, gathered
        await asyncio.gather(
            *(
                queue.enqueue(name, **dict(zip(PARAMS[name], args)))
                for name, args in jobs(kind, start, min(n, start + CHUNK))
            )
        )
    elapsed = time.perf_counter() - t0
    await queue.disconnect()
    return elapsed


def enqueue(n: int, kind: str = "noop") -> None:
    report(asyncio.run(_enqueue(n, kind)), n)
