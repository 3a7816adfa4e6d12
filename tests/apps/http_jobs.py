"""An app for the HTTP API's tests: jobs that keep their result, report progress
while the test holds them, and fail."""

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="web", result_ttl_s=600)
def add(a: int, b: int) -> int:
    return a + b


@app.job(queue="web", result_ttl_s=600)
def report(steps: int) -> dict:
    """Reports half its progress, then runs until the test releases it."""
    fastq.current_job().set_progress(0.5, {"done": steps // 2, "of": steps})
    app.redis.rpush(f"{app.namespace}:started", steps)
    # 1 s at a time: a call of the app's client gives up after its call_timeout_s
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if app.redis.blpop([f"{app.namespace}:release"], timeout=1) is not None:
            break
    return {"steps": steps}


@app.job(queue="web", retries=0)
def boom(message: str) -> None:
    raise RuntimeError(message)


@app.job(queue="web")
def batch_done(status: dict) -> None:
    """A batch's on_complete: notes the id it ran under (``<batch>.complete``)."""
    app.redis.rpush(f"{app.namespace}:batch_done", fastq.current_job().id)
