"""fastq's side: ``python -m fastq pool -c 2 --app fastq_tasks -q noop`` runs it.

``PEERBENCH_FASTQ_ASYNC=1`` (set by the harness for the io workload when fastq's
pool has ``--async-jobs``) makes ``io`` an ``async def`` job; otherwise it is a
plain function that sleeps, as the sync peers' jobs do."""

from __future__ import annotations

import asyncio
import os
import time

from counting import count, jobs, record, report, url

import fastq

app = fastq.App(os.environ.get("PEERBENCH_URL", "redis://127.0.0.1:1/0"), namespace="peerbench")
ASYNC_IO = os.environ.get("PEERBENCH_FASTQ_ASYNC") == "1"


@app.job(queue="noop")
def noop(i: int) -> None:
    record(i)


if ASYNC_IO:

    @app.job(queue="noop")
    async def io(i: int, ms: float) -> None:
        await asyncio.sleep(ms / 1000)
        record(i)

else:

    @app.job(queue="noop")
    def io(i: int, ms: float) -> None:
        time.sleep(ms / 1000)
        record(i)


@app.job(queue="noop")
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    app.configure(redis_url=url())
    todo = jobs(kind, 0, n)
    job = {"noop": noop, "io": io, "send_email": send_email}[todo[0][0]]
    t0 = time.perf_counter()
    job.enqueue_many([args for _, args in todo])
    report(time.perf_counter() - t0, n)
