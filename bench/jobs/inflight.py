"""The jobs of ``bench/inflight.py``, imported by the pool under test as
``--app bench.jobs.inflight`` (and by the benchmark, to enqueue them).

The Redis URL comes from ``FASTQ_REDIS_URL``; without it the app points at a port
nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import asyncio
import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))

SMTP_S = 0.02  # an SMTP round trip


@app.job(queue="asmtp")
async def asmtp(i: int) -> None:
    """An email handed to an SMTP relay: 20 ms of waiting on the network."""
    await asyncio.sleep(SMTP_S)


@app.job(queue="anoop")
async def anoop(i: int) -> None:
    """Does nothing, awaited: what the event loop costs per job."""


@app.job(queue="noop")
def noop(i: int) -> None:
    """Does nothing, called: the sync drain beside it."""


@app.job(queue="tsmtp")
def tsmtp(i: int) -> None:
    """The same email from a plain function, run in a thread (``--threads``):
    20 ms of blocking on the network."""
    time.sleep(SMTP_S)
