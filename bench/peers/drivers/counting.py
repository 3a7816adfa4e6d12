"""What every peer's job does: mark job ``i`` as run, so the harness can count runs
exactly (a counter) and distinct jobs (a bitmap), whatever the peer.

A job only appends its index to a buffer of its process; a flusher thread of the
process sends the buffer in one pipeline (``SETBIT seen i 1`` per index, then
``INCRBY count`` by the runs) once ``FLUSH_JOBS`` are buffered or ``FLUSH_MS``
after the first one, whichever comes first. So no peer pays a Redis round trip
per job for being counted (one per ~100 jobs instead, the same for every peer),
and the counts stay exact: every run is in the buffer until it is sent, and the
buffer is sent as well when the process ends (``atexit`` for an interpreter that
exits, and a wrapped ``os._exit`` for the children that multiprocessing, billiard,
RQ's work horse and fastq's pool end that way). A process killed by a signal
loses at most its last ``FLUSH_MS`` of runs; the harness waits for the counter to
reach N, and then one more second, before it stops any worker.

The Redis URL comes from ``PEERBENCH_URL``; a client, buffer and flusher are made
per process (after any fork), never shared across one.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Optional

import redis

COUNT_KEY = "peerbench:count"  # INCRBY per flush: every run of any job shows here
SEEN_KEY = "peerbench:seen"  # bit i set by job i: BITCOUNT is the distinct jobs run
# the memory workload's job, the same for every peer: send_email(*MAIL); its jobs
# carry no index, so they count runs only
MAIL = ("user123@example.com", "Your weekly digest", 42)
# runs buffered before the flusher sends them, or how long after the first buffered
# run (the environment can change them: a huge pair leaves only the flush at exit)
FLUSH_JOBS = int(os.environ.get("PEERBENCH_FLUSH_JOBS", "100"))
FLUSH_MS = float(os.environ.get("PEERBENCH_FLUSH_MS", "20"))
EXIT_WAIT_S = 2.0  # how long an exiting process waits for a flush in progress


class _Counts:
    """This process's buffered runs and the thread that sends them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the buffer
        self.sending = threading.Lock()  # one pipeline at a time: exit waits for it
        self.wake = threading.Condition(self.lock)
        self.indices: list[int] = []
        self.runs = 0  # buffered runs, indexed or not
        self.first_at = 0.0  # monotonic time of the oldest buffered run
        self.client = redis.Redis.from_url(url())
        self.thread = threading.Thread(target=self._flusher, name="peerbench-flush", daemon=True)
        self.thread.start()

    def add(self, i: Optional[int]) -> None:
        with self.lock:
            if not self.runs:
                self.first_at = time.monotonic()
                self.wake.notify()
            if i is not None:
                self.indices.append(i)
            self.runs += 1
            if self.runs >= FLUSH_JOBS:
                self.wake.notify()

    def _flusher(self) -> None:
        while True:
            with self.lock:
                while not self.runs:
                    self.wake.wait()
                due = self.first_at + FLUSH_MS / 1000
                while self.runs < FLUSH_JOBS and (left := due - time.monotonic()) > 0:
                    self.wake.wait(left)
            self.flush()

    def flush(self, wait_s: Optional[float] = None) -> None:
        """Send what is buffered (``wait_s``: give up waiting for a send in progress
        after that long, so that an exit never hangs)."""
        if not self.sending.acquire(timeout=-1 if wait_s is None else wait_s):
            return
        try:
            with self.lock:
                indices, runs = self.indices, self.runs
                self.indices, self.runs = [], 0
            if not runs:
                return
            pipe = self.client.pipeline(transaction=False)
            for i in indices:
                pipe.setbit(SEEN_KEY, i, 1)
            pipe.incrby(COUNT_KEY, runs)
            pipe.execute()
        finally:
            self.sending.release()


_counts: Optional[_Counts] = None
_real_exit = os._exit


def _get() -> _Counts:
    global _counts
    if _counts is None:
        _counts = _Counts()
    return _counts


def _forget() -> None:
    """In a forked child: the parent's buffer, locks and thread are the parent's."""
    global _counts
    _counts = None


def _flush_at_exit() -> None:
    if _counts is not None:
        _counts.flush(wait_s=EXIT_WAIT_S)


def _exit(code: int) -> None:
    _flush_at_exit()
    _real_exit(code)


os.register_at_fork(after_in_child=_forget)
atexit.register(_flush_at_exit)
os._exit = _exit  # the children that end by os._exit flush too


def url() -> str:
    return os.environ["PEERBENCH_URL"]


def record(i: int) -> None:
    """Job ``i`` ran (an indexed job: drain, blast, io, rtt)."""
    _get().add(i)


def count() -> None:
    """A job without an index ran (the memory workload's ``send_email``)."""
    _get().add(None)


async def arecord(i: int) -> None:
    """``record`` for asyncio peers: the same buffer, nothing awaited."""
    record(i)


async def acount() -> None:
    count()


def jobs(kind: str, start: int, stop: int) -> list[tuple[str, tuple[object, ...]]]:
    """Jobs ``start..stop-1`` of a workload as (job name, args), for the producers:
    ``noop(i)``, ``io(i, ms)`` (``PEERBENCH_IO_MS``, 5 by default: the job sleeps
    that long) or ``send_email(*MAIL)`` (kind ``mail``)."""
    if kind == "noop":
        return [("noop", (i,)) for i in range(start, stop)]
    if kind == "io":
        ms = float(os.environ.get("PEERBENCH_IO_MS", "5"))
        return [("io", (i, ms)) for i in range(start, stop)]
    if kind == "mail":
        return [("send_email", MAIL)] * (stop - start)
    raise ValueError(f"unknown job kind {kind!r}")


def report(seconds: float, jobs: int) -> None:
    """A producer's result, the one line the harness reads from its stdout."""
    import json

    print(json.dumps({"seconds": seconds, "jobs": jobs}), flush=True)
