"""The job of ``bench/rate_limit.py``, imported by the pools under test as
``--app bench.jobs.rate`` (and by the benchmark, to enqueue it).

The Redis URL comes from ``FASTQ_REDIS_URL``; without it the app points at a port
nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="limited")
def send(i: int) -> None:
    """An email to a rate-limited relay, minus the relay: records its start on Redis'
    clock (the clock the limit runs on), in µs."""
    seconds, micros = app.redis.time()
    app.redis.rpush(f"{app.namespace}:starts", seconds * 1_000_000 + micros)
