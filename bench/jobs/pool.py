"""The jobs of ``bench/e2e_pool.py``, imported by the pool under test as
``--app bench.jobs.pool`` (and by the benchmark itself, to enqueue them).

The Redis URL comes from ``FASTQ_REDIS_URL``, as a deployed pool gets it; without
it the app points at a port nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="noop")
def noop(i: int) -> None:
    """Does nothing: what a pool costs per job."""


@app.job(queue="smtp")
def smtp(i: int) -> None:
    """An email handed to an SMTP relay: 5 ms of waiting on the network."""
    time.sleep(0.005)


@app.job(queue="slow")
def slow(i: int) -> None:
    """A 50 ms job: a child killed mid-job holds some of these."""
    time.sleep(0.05)
