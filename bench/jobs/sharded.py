"""The app of ``bench/cluster_connections.py``, imported by the idle pools it counts
connections of as ``--app bench.jobs.sharded``: ``mailer`` over four shards (the
benchmark runs no job; the pools only hold their connections).

The Redis URL comes from ``FASTQ_REDIS_URL``; without it the app points at a port
nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="mailer", shards=4)
def send(i: int) -> None:
    """An email; never enqueued here."""
