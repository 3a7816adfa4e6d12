"""Prometheus metrics of a pool (``fastq pool --metrics-port 9100``).

Children count what became of their jobs in a shared anonymous mmap, the
:class:`MetricsBoard`, one block per heartbeat slot: plain float stores into
memory, per batch for the sync runner (per job for threads and async), never a
syscall. The master serves ``/metrics`` (``prometheus_client``, the ``metrics``
extra) from a thread and sums the blocks at scrape time. When a child exits its
block is folded into a base before its slot is reused, so a counter never goes
backwards when a child is recycled or killed.

A block holds, per (queue, job): the counters processed, failed, retried, dead,
stalled, and two histograms (job run time, enqueue-to-start latency). The sync
runner observes a batch at once: its jobs' mean run time, and the latency of its
first (oldest) job, each counted once per job of the batch under that job's name.
``failed`` counts the runs that did not succeed (retried, dead or broken).
"""

from __future__ import annotations

import logging
import math
import mmap
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from fastq.protocol.keys import logical_queue
from fastq.protocol.outcomes import Outcomes

if TYPE_CHECKING:
    from fastq.job import Runnable

log = logging.getLogger("fastq.metrics")

KINDS = ("processed", "failed", "retried", "dead", "stalled")
PROCESSED, FAILED, RETRIED, DEAD, STALLED = range(len(KINDS))
BUCKETS_S = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, math.inf)
HIST = len(BUCKETS_S) + 1  # the buckets' counts (not cumulative), then the sum
DURATION_AT = len(KINDS)
LATENCY_AT = DURATION_AT + HIST
CELL = LATENCY_AT + HIST  # floats per (queue, job)
OTHER_JOB = "other"  # a job name the master did not know when it started


class MetricsBoard:
    """Per-child metric blocks in one shared anonymous mapping (made before fork).

    Args:
        slots: as many as the heartbeat board's.
        queues: the queues labelled; jobs of another count as ``queues[0]``'s.
        jobs: the job names labelled; others count as ``"other"``.
    """

    def __init__(self, slots: int, queues: list[str], jobs: Iterable[str]) -> None:
        self.slots = slots
        self.queues = list(queues)
        self.jobs = [*sorted(jobs), OTHER_JOB]
        self.block = len(self.queues) * len(self.jobs) * CELL  # floats per child
        self._buf = mmap.mmap(-1, max(slots, 1) * self.block * 8)
        self._view = memoryview(self._buf).cast("d")
        self._base = [0.0] * self.block  # folded in from children gone
        # the master's loop folds while its metrics thread sums: a sum taken between a
        # fold's two halves would count a child twice, and the counter then go back
        self._lock = threading.Lock()

    def child(self, slot: int) -> ChildMetrics:
        """What a child counts into (its heartbeat slot's block)."""
        return ChildMetrics(self, slot * self.block)

    def fold(self, slot: int) -> None:
        """Move a gone child's counts into the base; its block starts at zero again."""
        view, at, base = self._view, slot * self.block, self._base
        with self._lock:
            for i in range(self.block):
                value = view[at + i]
                if value:
                    base[i] += value
                    view[at + i] = 0.0

    def add(self, queue: str, job: str, kind: int, n: float = 1) -> None:
        """Count in the base (the master's own: stalls it finds)."""
        q = self.queues.index(queue) if queue in self.queues else 0
        j = self.jobs.index(job) if job in self.jobs else len(self.jobs) - 1
        with self._lock:
            self._base[(q * len(self.jobs) + j) * CELL + kind] += n

    def totals(self) -> list[float]:
        """The base plus every child's block."""
        view, block = self._view, self.block
        with self._lock:
            sums = list(self._base)
            for slot in range(self.slots):
                at = slot * block
                part = view[at : at + block]
                if any(part):
                    for i, value in enumerate(part):
                        sums[i] += value
        return sums

    def cells(self, totals: list[float]) -> Iterator[tuple[str, str, list[float]]]:
        """``(queue, job, floats of the cell)`` of every cell with anything counted."""
        for q, queue in enumerate(self.queues):
            for j, job in enumerate(self.jobs):
                at = (q * len(self.jobs) + j) * CELL
                cell = totals[at : at + CELL]
                if any(cell):
                    yield queue, job, cell


class ChildMetrics:
    """A child's view of its block: counts outcomes, observes run times."""

    def __init__(self, board: MetricsBoard, offset: int) -> None:
        self._view = board._view
        self._offset = offset
        self._queues = {queue: q for q, queue in enumerate(board.queues)}
        self._jobs = {job: j for j, job in enumerate(board.jobs)}
        self._per_queue = len(board.jobs) * CELL

    def _cell(self, queue: str, job: str) -> int:
        j = self._jobs.get(job)
        if j is None:
            j = len(self._jobs) - 1
        q = self._queues.get(queue)
        if q is None:  # a shard: counted under its queue's name
            q = self._queues[queue] = self._queues.get(logical_queue(queue), 0)
        return self._offset + q * self._per_queue + j * CELL

    def count(self, queue: str, job: str, kind: int, n: int = 1) -> None:
        self._view[self._cell(queue, job) + kind] += n

    def observe(self, queue: str, job: str, at: int, seconds: float, n: int = 1) -> None:
        """``n`` observations of ``seconds`` into the histogram at ``at``
        (``DURATION_AT`` or ``LATENCY_AT``)."""
        cell = self._cell(queue, job) + at
        view = self._view
        for i, bound in enumerate(BUCKETS_S):
            if seconds <= bound:
                view[cell + i] += n
                break
        view[cell + HIST - 1] += seconds * n

    def batch(
        self,
        queue: str,
        jobs: list[Runnable],
        out: Outcomes,
        before: tuple[int, int, int, int],
        elapsed_s: float,
    ) -> None:
        """Count what became of a batch's ``jobs`` run by the sync runner: what
        ``out`` gained since ``before`` (:func:`lengths`), in ``elapsed_s``."""
        n = len(jobs)
        if not n:
            return
        first = jobs[0][1]
        single = all(job[1] is first for job in jobs)
        done, retry, dead, broken = before
        names: Optional[dict[bytes, str]] = None
        if single:
            self.count(queue, first.name, PROCESSED, len(out.done) - done)
        else:
            names = {job[0]: job[1].name for job in jobs}
            for job_id in out.done[done:]:
                self.count(queue, names.get(job_id, OTHER_JOB), PROCESSED)
        for kind, entries in (
            (RETRIED, out.retry[retry:]),
            (DEAD, out.dead[dead:]),
            (None, out.broken[broken:]),
        ):
            for entry in entries:
                if single:
                    name = first.name
                else:
                    assert names is not None
                    name = names.get(entry[0], OTHER_JOB)
                if kind is not None:
                    self.count(queue, name, kind)
                self.count(queue, name, FAILED)
        # each job name of a mixed batch gets its own jobs' share of the times
        shares = {first.name: n} if names is None else Counter(names.values())
        enqueued_ms = jobs[0][5].get("t")
        latency_s: Optional[float] = None
        if isinstance(enqueued_ms, (int, float)):
            latency_s = max(0.0, time.time() - enqueued_ms / 1000 - elapsed_s)
        for name, k in shares.items():
            self.observe(queue, name, DURATION_AT, elapsed_s / n, k)
            if latency_s is not None:
                self.observe(queue, name, LATENCY_AT, latency_s, k)

    def job(
        self,
        queue: str,
        job: Runnable,
        out: Outcomes,
        before: tuple[int, int, int, int],
        elapsed_s: float,
    ) -> None:
        """Count one job settled into ``out`` (threads, async)."""
        name = job[1].name
        done, retry, dead, broken = before
        if len(out.done) > done:
            self.count(queue, name, PROCESSED)
        else:
            if len(out.retry) > retry:
                self.count(queue, name, RETRIED)
            elif len(out.dead) > dead:
                self.count(queue, name, DEAD)
            elif len(out.broken) <= broken:
                self.count(queue, name, STALLED)
            self.count(queue, name, FAILED)
        self.observe(queue, name, DURATION_AT, elapsed_s)
        enqueued_ms = job[5].get("t")
        if isinstance(enqueued_ms, (int, float)):
            latency_s = max(0.0, time.time() - enqueued_ms / 1000 - elapsed_s)
            self.observe(queue, name, LATENCY_AT, latency_s)


def counted(
    metrics: ChildMetrics,
    queue: str,
    job: Runnable,
    settle: Callable[[Outcomes], None],
    elapsed_s: float,
) -> Callable[[Outcomes], None]:
    """``settle``, counting the job's outcome as it records it (threads, async)."""

    def settle_counted(out: Outcomes) -> None:
        before = lengths(out)
        settle(out)
        metrics.job(queue, job, out, before, elapsed_s)

    return settle_counted


def lengths(out: Outcomes) -> tuple[int, int, int, int]:
    """Where ``out``'s outcome lists end now, for :meth:`ChildMetrics.batch`."""
    return len(out.done), len(out.retry), len(out.dead), len(out.broken)
