"""Sync jobs for the pool fault tests in threaded mode (``--threads N``): each run
is recorded in Redis (as in ``async_jobs``), with the pid that ran it."""

from __future__ import annotations

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


def _record(i: int) -> None:
    pipe = app.redis.pipeline(transaction=False)  # its connection pool serves the threads
    pipe.hincrby(f"{app.namespace}:runs", str(i), 1)
    pipe.sadd(f"{app.namespace}:pids", os.getpid())
    pipe.execute()


@app.job(queue="q", backoff_s=0.1)
def work(i: int, sleep_s: float = 0.0) -> None:
    _record(i)
    time.sleep(sleep_s)


@app.job(queue="q", timeout_s=0.5, retries=1, backoff_s=0.1)
def hangs(i: int) -> None:
    """Runs past its timeout every time (a thread cannot be stopped: 30 s)."""
    _record(i)
    time.sleep(30)


@app.job(queue="q", timeout_s=0.5, retries=2, backoff_s=0.1)
def hangs_once(i: int) -> None:
    """Past its timeout in its first attempt only."""
    _record(i)
    if fastq.current_job().attempt == 1:
        time.sleep(30)
