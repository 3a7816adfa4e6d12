"""Jobs for rate-limit tests: each run records when it started, on Redis' clock (the
clock the claim's rate limit runs on; a job starts after its claim, so a start is
never earlier than the claim that took it)."""

from __future__ import annotations

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="q")
def tick(i: int) -> None:
    seconds, micros = app.redis.time()
    app.redis.rpush(f"{app.namespace}:starts", f"{i} {seconds * 1_000_000 + micros}")
