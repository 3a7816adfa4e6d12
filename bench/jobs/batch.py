"""The jobs of ``bench/batch_drain.py``, imported by the pool under test as
``--app bench.jobs.batch`` (and by the benchmark itself, to enqueue them).

The Redis URL comes from ``FASTQ_REDIS_URL``, as a deployed pool gets it; without
it the app points at a port nothing listens on, never at a Redis on 6379.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="blast")
def noop(i: int) -> None:
    """Does nothing: what a pool costs per job, in a batch or not."""


@app.job(queue="blast-callbacks")
def called_back(status: dict[str, Any]) -> None:
    """A batch's ``on_complete``: notes when it ran (Unix s) and what it was told.
    On a queue of its own: enqueued on the blast's queue, it would first fold every
    record the drain's acks logged (an enqueue checks a new id has none), stalling
    Redis for a few hundred ms (tests/lua/test_enqueue_fold_bound.py)."""
    note = {"at": time.time(), "status": status}
    app.redis.rpush(f"{app.namespace}:called_back", orjson.dumps(note))
