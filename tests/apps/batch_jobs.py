"""Jobs for the batch fault tests (tests/fault/test_batches_faults.py): each run of a
job, and each start and end of a callback, is one line appended to the runs file
(``$BATCH_JOBS_RUNS_FILE``), so that a test counts exact executions across every
process of a pool.

A file, not Redis: the cluster test fails a master over, and a record kept there
could be lost with it (an acknowledged write the replica never got) or doubled;
one small ``write`` with ``O_APPEND`` is atomic among the children, and survives
every SIGKILL the tests deal.

Lines: ``run <i> <pid>`` (an item started), ``start <kind> <pid>`` (a callback
started: its first statement), ``end <kind> <pid> <json>`` (it finished: what it
was told and what it saw).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import redis

import fastq

# max_stalls: a job whose child the tests kill mid-run goes back to the queue, however
# often that happens (never dead as a poison job, which would blur the dead count)
app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"), max_stalls=1000)


def _append(line: str) -> None:
    fd = os.open(os.environ["BATCH_JOBS_RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.job(queue="b", backoff_s=0.1)
def item(i: int, fail: bool = False, sleep_s: float = 0.0) -> None:
    """One job of a batch: notes its run; ``fail``: fails for good (dead at once)."""
    _append(f"run {i} {os.getpid()}")
    if sleep_s:
        time.sleep(sleep_s)
    if fail:
        raise fastq.Fail(f"item {i} fails for good")


@app.job(queue="b2")
def item2(i: int) -> None:
    """An item of a second queue (the pool says it exists as it starts, so that a
    test may pause it before any job of it is enqueued)."""
    _append(f"run {i} {os.getpid()}")


def _look(status: dict[str, Any]) -> dict[str, Any]:
    """What a callback sees as it runs: the items that had run, what their queues
    held, the batch's status. Read again while Redis cannot answer (a master
    failing over), for 30 s: the callback must not fail, which would run it twice."""
    queues = os.environ.get("BATCH_JOBS_QUEUES", "b").split(",")
    deadline = time.monotonic() + 30
    while True:
        try:
            batch = app.batch_status(status["id"])
            return {
                "status": status,
                "ran": len(read_runs(Path(os.environ["BATCH_JOBS_RUNS_FILE"])).items),
                "queues": {q: app.stats(q) for q in queues},
                "batch": batch.as_dict() if batch is not None else None,
            }
        except (fastq.FastqError, redis.RedisError) as exc:
            if time.monotonic() > deadline:
                return {"status": status, "error": repr(exc)}
            time.sleep(0.1)


def _callback(kind: str, status: dict[str, Any]) -> None:
    _append(f"start {kind} {os.getpid()}")
    _append(f"end {kind} {os.getpid()} {orjson.dumps(_look(status)).decode()}")


@app.job(queue="cb")
def report(status: dict[str, Any]) -> None:
    """A batch's ``on_complete``."""
    _callback("complete", status)


@app.job(queue="cb")
def notify(status: dict[str, Any]) -> None:
    """A batch's ``on_success``."""
    _callback("success", status)


class Runs:
    """What the runs file says: runs of each item, callback starts and ends."""

    def __init__(self, text: str) -> None:
        self.items: Counter[int] = Counter()
        self.starts: list[tuple[str, int]] = []  # (kind, pid)
        self.ends: list[tuple[str, dict[str, Any]]] = []  # (kind, what it saw)
        for line in text.splitlines():
            word, rest = line.split(" ", 1)
            if word == "run":
                self.items[int(rest.split()[0])] += 1
            elif word == "start":
                kind, pid = rest.split()
                self.starts.append((kind, int(pid)))
            elif word == "end":
                kind, _, seen = rest.split(" ", 2)
                self.ends.append((kind, orjson.loads(seen)))

    def started(self, kind: str) -> list[int]:
        """The pids of the runs of callback ``kind`` (once it was started)."""
        return [pid for k, pid in self.starts if k == kind]

    def ended(self, kind: str) -> list[dict[str, Any]]:
        return [seen for k, seen in self.ends if k == kind]


def read_runs(path: Path) -> Runs:
    return Runs(path.read_text() if path.exists() else "")


def produce(batch_id: str, first: int, n: int, queue: str, chunk: int) -> None:
    """A producer process of a shared batch: joins the open batch ``batch_id`` and
    enqueues items ``first``..``first + n - 1`` on ``queue``, ``chunk`` at a time,
    leaving the batch open."""
    with app.batch(id=batch_id, close=False):
        for lo in range(first, first + n, chunk):
            calls = [(i,) for i in range(lo, min(lo + chunk, first + n))]
            app.enqueue_many("item" if queue == "b" else "item2", calls, queue=queue)


if __name__ == "__main__":  # python -m tests.apps.batch_jobs NS BATCH FIRST N QUEUE CHUNK
    ns, bid, first_s, n_s, queue_name, chunk_s = sys.argv[1:]
    app.configure(namespace=ns)
    produce(bid, int(first_s), int(n_s), queue_name, int(chunk_s))
