"""An app for worker subprocesses in tests: every run of a job is counted in Redis."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="count")
def count(i: int) -> None:
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)
