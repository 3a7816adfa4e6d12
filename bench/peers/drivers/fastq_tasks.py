"""fastq's side: ``python -m fastq pool -c 2 --app fastq_tasks -q noop`` runs it."""

from __future__ import annotations

import os
import time

from counting import record, report, url

import fastq

app = fastq.App(os.environ.get("PEERBENCH_URL", "redis://127.0.0.1:1/0"), namespace="peerbench")


@app.job(queue="noop")
def noop(i: int) -> None:
    record(i)


def enqueue(n: int) -> None:
    app.configure(redis_url=url())
    t0 = time.perf_counter()
    noop.enqueue_many([(i,) for i in range(n)])
    report(time.perf_counter() - t0, n)
