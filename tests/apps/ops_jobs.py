"""An app for the operator CLI tests: ``flaky`` fails while the namespace's
``broken_mode`` key is set, and counts every run that succeeds."""

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="mailer", retries=0)
def flaky(i: int) -> None:
    if app.redis.exists(f"{app.namespace}:broken_mode"):
        raise RuntimeError(f"smtp down for {i}")
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)


@app.job(queue="slow", retries=0)
def hold(i: int) -> None:
    """Says it started, then runs until the test releases it."""
    app.redis.rpush(f"{app.namespace}:started", i)
    # 1 s at a time: a call of the app's client gives up after its call_timeout_s
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if app.redis.blpop([f"{app.namespace}:release"], timeout=1) is not None:
            return
