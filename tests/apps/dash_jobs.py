"""Jobs for the dashboard's browser tests (tests/browser): one that runs, one that
fails until a flag is set in Redis (a dead job that a retry then runs), and a
periodic one for the periodic page."""

from __future__ import annotations

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="dash")
def ok(i: int) -> None:
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)


@app.job(queue="dash", retries=0)
def flaky(i: int) -> None:
    """Fails (and, with no retries, dies) until ``NS:fixed`` is set."""
    if not app.redis.exists(f"{app.namespace}:fixed"):
        raise RuntimeError(f"the SMTP server refused message {i}")
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)


@app.job(queue="dash")
def held(i: int) -> None:
    """Runs until the test pushes to ``NS:release`` (30 s at most): a job in flight
    for as long as the test looks at it."""
    # 1 s at a time: a call of the app's client gives up after its call_timeout_s
    # (5 s), and a BLPOP of 30 s failed the job, which then read 'scheduled'
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if app.redis.blpop([f"{app.namespace}:release"], timeout=1) is not None:
            break
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)


@app.periodic(cron="30 2 * * *", tz="Europe/Berlin", queue="maint")
def vacuum() -> None:
    pass


@app.periodic(every_s=1, queue="ticks")
def tick() -> None:
    pass
