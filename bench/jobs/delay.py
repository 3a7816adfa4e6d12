"""The job of ``bench/e2e_delay.py``, imported by the pool under test as
``--app bench.jobs.delay``.

The Redis URL comes from ``FASTQ_REDIS_URL``, as a deployed pool gets it; without
it the app points at a port nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="delayed")
def stamp(i: int) -> None:
    """Records when it started (Unix seconds, the first thing it does)."""
    started = time.time()
    app.redis.rpush(f"{app.namespace}:started", f"{i} {started!r}")
