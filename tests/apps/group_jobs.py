"""Jobs of tenants for the fair-share test of groups: each run appends its tenant
to a file (``$GROUP_JOBS_RUNS_FILE``), so the order the pool ran them in can be read."""

from __future__ import annotations

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="q", group="tenant-{tenant}")
def mail(tenant: str, i: int) -> None:
    with open(os.environ["GROUP_JOBS_RUNS_FILE"], "a") as f:
        f.write(f"{tenant}\n")  # one small append: atomic among the children
