"""``async def`` jobs that record how many of them a worker process had in flight at
most (``--async-jobs N``, or its old spelling ``--concurrency N``)."""

from __future__ import annotations

import asyncio
import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))

# this process' jobs in flight now and at most: one event loop runs them, so the
# count needs no lock (it changes only between awaits)
_now = 0
_peak = 0


@app.job(queue="inflight")
async def hold(sleep_s: float) -> None:
    global _now, _peak
    _now += 1
    _peak = max(_peak, _now)
    app.redis.hset(f"{app.namespace}:peak", str(os.getpid()), _peak)
    try:
        await asyncio.sleep(sleep_s)
    finally:
        _now -= 1
    app.redis.hincrby(f"{app.namespace}:runs", "hold", 1)
