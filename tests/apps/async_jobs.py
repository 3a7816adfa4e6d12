"""``async def`` jobs for pool fault tests: each run is recorded in Redis (as in
``pool_jobs``), with the pid that ran it."""

from __future__ import annotations

import asyncio
import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


def _record(i: int) -> None:
    # a quick blocking call: a few hundred microseconds of the loop, for a test
    pipe = app.redis.pipeline(transaction=False)
    pipe.hincrby(f"{app.namespace}:runs", str(i), 1)
    pipe.sadd(f"{app.namespace}:pids", os.getpid())
    pipe.execute()


@app.job(queue="q", backoff_s=0.1)
async def work(i: int, sleep_s: float = 0.0) -> None:
    _record(i)
    await asyncio.sleep(sleep_s)


@app.job(queue="q")
async def suicide(i: int) -> None:
    """Kills its own worker every time, with all it holds in flight: a poison job."""
    _record(i)
    await asyncio.sleep(0.05)
    os._exit(1)


@app.job(queue="q")
async def blocks(i: int) -> None:
    """A blocking call in an async def: the loop stops for a minute."""
    _record(i)
    time.sleep(60)
