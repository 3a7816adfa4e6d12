"""One job module run under a real ``fastq pool`` and under each test mode
(tests/integration/test_test_mode_parity.py): what each job and hook saw is
appended, one JSON line each, to the file ``$PARITY_LOG`` names (read at each
call, so the pool's child and the test's process each write their own)."""

import os
from typing import Any

import orjson

import fastq
from fastq.hooks import JobEvent

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


def note(*what: Any) -> None:
    with open(os.environ["PARITY_LOG"], "ab") as log:
        log.write(orjson.dumps(what) + b"\n")


@app.before_job
def before(event: JobEvent) -> None:
    note("before", event.name, event.attempt, fastq.current_job().id == event.job_id)


@app.on_failure
def failed(event: JobEvent) -> None:
    note("failure", event.name, event.attempt, event.outcome)


@app.after_job
def after(event: JobEvent) -> None:
    note("after", event.name, event.attempt, event.outcome, type(event.exc).__name__)


@app.job(queue="q", result_ttl_s=600)
def value(x: int) -> dict[str, Any]:
    return {"double": x * 2, "args": (x,)}


@app.job(queue="q", result_ttl_s=600)
def progress(steps: int) -> int:
    job = fastq.current_job()
    for i in range(1, steps + 1):
        job.set_progress(i / steps, {"step": i})
    note("progress", job.name, job.attempt, job.queue)
    return job.attempt


@app.job(queue="q", result_ttl_s=600, retry_delays_s=[0.05])
def flaky(key: str) -> str:
    attempt = fastq.current_job().attempt
    note("ran", "flaky", attempt, key)
    if attempt == 1:
        raise ConnectionError(f"{key}: the first try fails")
    return f"{key} on attempt {attempt}"


@app.job(queue="q", result_ttl_s=600, retries=1, retry_delays_s=[0.05])
def doomed() -> None:
    raise ValueError("never works")


@app.job(queue="q", retries=3)
def refused() -> Any:
    return fastq.Fail("refused at once")
