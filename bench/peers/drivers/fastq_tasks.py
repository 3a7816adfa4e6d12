"""fastq's side: ``python -m fastq pool -c 2 --app fastq_tasks -q noop`` runs it."""

from __future__ import annotations

import os
import time

from counting import MAIL, count, record, report, url

import fastq

app = fastq.App(os.environ.get("PEERBENCH_URL", "redis://127.0.0.1:1/0"), namespace="peerbench")


@app.job(queue="noop")
def noop(i: int) -> None:
    record(i)


@app.job(queue="noop")
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    app.configure(redis_url=url())
    job, args = (noop, [(i,) for i in range(n)]) if kind == "noop" else (send_email, [MAIL] * n)
    t0 = time.perf_counter()
    job.enqueue_many(args)
    report(time.perf_counter() - t0, n)
