"""SAQ's side: ``saq saq_tasks.settings --workers 2`` runs it (``concurrency`` 10 per
worker process, SAQ's default)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from counting import MAIL, acount, arecord, report, url
from saq import Queue

CHUNK = 1000  # enqueue calls in flight at once

queue = Queue.from_url(url(), name="noop")


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    await arecord(i)


async def send_email(ctx: dict[str, Any], *, to: str, subject: str, n: int) -> None:
    await acount()


settings = {"queue": queue, "functions": [noop, send_email], "concurrency": 10}


async def _enqueue(n: int, kind: str) -> float:
    await queue.connect()
    to, subject, number = MAIL
    t0 = time.perf_counter()
    for start in range(0, n, CHUNK):  # no bulk API: enqueue calls, gathered
        await asyncio.gather(
            *(
                queue.enqueue("noop", i=i)
                if kind == "noop"
                else queue.enqueue("send_email", to=to, subject=subject, n=number)
                for i in range(start, min(n, start + CHUNK))
            )
        )
    elapsed = time.perf_counter() - t0
    await queue.disconnect()
    return elapsed


def enqueue(n: int, kind: str = "noop") -> None:
    report(asyncio.run(_enqueue(n, kind)), n)
