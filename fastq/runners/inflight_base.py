"""What the two runners of jobs in flight share: the asyncio one
(:mod:`fastq.runners.aio`) and the threads (:mod:`fastq.runners.threads`).

Both take the jobs of a batch that they run (:meth:`FlightRunner.launch`), each
held as a :class:`Flight` until it ends, and keep under one condition their count
of jobs in flight and the outcomes of those that finished, which the worker's loop
collects, waits on and drains the same way for either. A job in flight holds one
of the master's in-flight records while it runs, runs in a job context of its own
(``current_job()``), between the app's per-job hooks, and ends as one of the
outcomes below, each a closure that records it into the outcomes of its queue.
What differs is how a job runs (a task on an event loop, a thread of a pool), how
it is timed out, and how the jobs still in flight end at a stop.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from fastq import context
from fastq.errors import Fail, Retry
from fastq.hooks import JobEvent
from fastq.job import JobDef, Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.runners.settle import note_circuit, settle_failure
from fastq.runners.slots import WAIT_TICK_S, wait_for_free
from fastq.runners.sync import SyncRunner
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.shm.metrics import counted

log = logging.getLogger("fastq.worker")

# What records a job's outcome into the outcomes of its queue.
Settle = Callable[[Outcomes], None]

_OUTCOME_TYPES = (Retry, Fail)


class Flight:
    """One job handed over to a runner, until it ends."""

    __slots__ = ("job", "queue", "queue_index", "record", "timed_out")

    def __init__(self, job: Runnable, queue: str, queue_index: int) -> None:
        self.job = job
        self.queue = queue
        self.queue_index = queue_index
        self.record = -1  # the master's in-flight record it holds while it runs (-1: none)
        self.timed_out = False


# -- outcomes ---------------------------------------------------------------------------


def name(flight: Flight) -> str:
    """The job as the log names it."""
    job_id, target = flight.job[0], flight.job[1]
    return f"job {job_id.decode()} ({target.name})"


def kept(job: Runnable, result: Any, ttl_ms: int, run_ms: int = 0) -> Settle:
    """Done (its run ``run_ms`` long), its result kept for ``ttl_ms``."""
    return lambda out: SyncRunner._keep(out, job, result, ttl_ms, run_ms)


def failed(job: Runnable, exc: BaseException) -> Settle:
    """As its retry policy says for ``exc`` (or a returned Retry or Fail)."""
    job_id, target, args, kwargs, attempt, env = job
    return lambda out: settle_failure(out, job_id, target, args, kwargs, attempt, env, exc)


def stalled(job_id: bytes) -> Settle:
    """A SystemExit or KeyboardInterrupt of the job's own: counted a stall."""
    return lambda out: out.stalled.append(job_id)


def unstarted(job_id: bytes) -> Settle:
    """Handed back before it started: nothing counted."""
    return lambda out: out.unstarted.append(job_id)


def interrupted(job_id: bytes) -> Settle:
    """Cut short by a stop: not the job's fault, back to the front, no stall."""
    return lambda out: out.interrupted.append(job_id)


def returned(job: Runnable, result: Any, run_ms: int = 0) -> tuple[Settle, Optional[BaseException]]:
    """The outcome of a job that returned ``result`` after a run of ``run_ms``, and
    its failure if any (a returned Retry or Fail)."""
    if result is not None and isinstance(result, _OUTCOME_TYPES):
        return failed(job, result), result
    ttl_ms = job[1].result_ttl_ms
    if ttl_ms is None:
        job_id, target, args, kwargs, attempt = job[:5]
        if target.circuit is None:  # the common case: nothing more a job
            return (lambda out: out.note_done(job_id, run_ms, attempt)), None

        def done(out: Outcomes) -> None:
            note_circuit(out, target, args, kwargs, True)
            out.note_done(job_id, run_ms, attempt)

        return done, None
    return kept(job, result, ttl_ms, run_ms), None


# -- the runners' base --------------------------------------------------------------------


class FlightRunner:
    """The base of a runner of jobs in flight (see the module).

    Args:
        worker_id: named in the log.
        sync: the worker's sync runner: its rate-key gate, hooks and metrics.
        slot: the master's heartbeat slot (its in-flight records name the jobs held).
        progress: where the jobs' progress reports go.
        size: jobs in flight at most.
        max_claim: the most jobs claimed in one round trip.
        records: how many of the slot's in-flight records are this runner's, from
            ``record_base`` on.
        cond: the condition the worker's thread waits on (shared by two runners in
            a mixed app); its lock guards the runner's state.

    A runner says which jobs it takes (:meth:`takes`), how many are free
    (:attr:`free`), and hands its flights over (:meth:`_hand_over`).
    """

    may_claim_ahead = False  # a batch written ahead may take more jobs than are free
    _where = "in flight"  # where the stopping worker's jobs run, for its log line
    sized = False  # claim what the batch sizer says (once a slot is free), not the free slots
    flight_type: type[Flight] = Flight  # what holds a job handed over

    def __init__(
        self,
        worker_id: Callable[[], str],
        sync: SyncRunner,
        slot: Optional[HeartbeatSlot],
        progress: Optional[context.ProgressBuffer],
        size: int,
        max_claim: int,
        records: int,
        record_base: int = 0,
        cond: Optional[threading.Condition] = None,
    ) -> None:
        self.worker_id = worker_id
        self.sync = sync
        self.slot = slot
        self.progress = progress
        self.max_claim = max_claim
        self.record_base = record_base
        self._records_end = record_base + (0 if slot is None else records)
        # claim once this many slots are free (or ACK_LINGER_S after the first)
        self.enough = max(1, min(max_claim, size) // 4)
        self._cond = cond or threading.Condition(threading.Lock())
        self._in_flight = 0  # under _cond: handed over, not ended
        self._finished: dict[str, Outcomes] = {}  # under _cond
        self._finished_n = 0  # under _cond
        self._queue_index: dict[str, int] = {}  # the slot's index of each queue launched

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def finished_n(self) -> int:
        return self._finished_n

    @property
    def free(self) -> int:
        """Slots free for more jobs (under the lock, or as a hint)."""
        raise NotImplementedError

    @staticmethod
    def takes(target: JobDef[Any]) -> bool:
        """Does this runner run the jobs of ``target`` (the others, the loop)?"""
        raise NotImplementedError

    def _hand_over(self, flights: list[Any]) -> None:
        """Count ``flights`` in flight and start them (or queue them to start)."""
        raise NotImplementedError

    # -- the worker's thread -----------------------------------------------------------

    def claim_n(self, sized_n: int, stopping: Callable[[], bool]) -> int:
        """At most the free slots, once enough are free (``sized``: the batch
        sizer's figure, once a slot is free)."""
        with self._cond:
            free = wait_for_free(self._cond, lambda: self.free, self.enough, stopping)
        if not free:
            return 0
        return sized_n if self.sized else min(self.max_claim, free)

    def launch(
        self, runnable: list[Runnable], out: Outcomes, queue_index: int, queue: str
    ) -> list[Runnable]:
        self._queue_index[queue] = queue_index
        rest: list[Runnable] = []
        flights: list[Flight] = []
        takes, flight_of, sync = self.takes, self.flight_type, self.sync
        for job in runnable:
            target = job[1]
            if not takes(target):
                rest.append(job)
            elif (target.rate_key is not None or target.circuit is not None) and sync.gated(
                out, queue, job
            ):
                continue  # rescheduled: to its key's token, or past its open circuit
            else:
                flights.append(flight_of(job, queue, queue_index))
        if flights:
            self._hand_over(flights)
        return rest

    def measured(self) -> tuple[float, int]:
        return 0.0, 0  # it claims its free slots: the batch sizer is not asked

    def take_waiting(self, after_s: float) -> dict[str, list[bytes]]:
        return {}  # a job handed over starts at once

    def collect(self, pending: dict[str, Outcomes]) -> int:
        with self._cond:
            if not self._finished_n:
                return 0
            finished, self._finished = self._finished, {}
            n, self._finished_n = self._finished_n, 0
        progress, slot = self.progress, self.slot
        for queue, out in finished.items():
            if out.progress_ended and progress is not None:
                # said ended here, not where the job ran: this waits for a send in flight
                out.progress_ended = progress.ended(queue, out.progress_ended)
            if slot is not None and out.done:
                # noted as they join the pending outcomes, in the order a round trip
                # carries them (a kill before re-runs them: they count as in flight)
                kept = {job_id for job_id, _, _ in out.results} if out.results else ()
                done = [j for j in out.done if j not in kept] if kept else out.done
                slot.finished_many(self._queue_index[queue], done)
            pending[queue].extend(out)
        return n

    def wait_finished(self, timeout_s: float, stopping: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._finished_n and self._in_flight and not stopping():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(min(left, WAIT_TICK_S))

    def drain(self, pending: dict[str, Outcomes]) -> int:
        if self._in_flight:
            log.info(
                "worker %s: stopping; waiting for %d jobs %s",
                self.worker_id(),
                self._in_flight,
                self._where,
            )
        with self._cond:
            while self._in_flight:
                self._cond.wait(WAIT_TICK_S)
        return self.collect(pending)

    # -- where a job runs ----------------------------------------------------------------

    def _holds(self, record: int) -> bool:
        """Is ``record`` one of the master's in-flight records (of this runner's)?"""
        return self.record_base <= record < self._records_end

    def _enter(self, flight: Flight) -> tuple[context.BatchCursor, Any, Optional[JobEvent]]:
        """A job starts: it holds its record, enters a job context of its own, and
        the ``before_job`` hooks run in it; returns the context, its token, the
        hooks' event."""
        job, record = flight.job, flight.record
        if self.record_base <= record < self._records_end:  # _holds(), inline: per job
            assert self.slot is not None
            self.slot.hold(record, flight.queue_index, job[0])
        cursor = context.BatchCursor(flight.queue, [job], self.progress)
        cursor.index = 0
        token = context.enter_batch(cursor)
        hooks = self.sync.hooks
        event = hooks.started(job, flight.queue) if hooks.per_job else None
        return cursor, token, event

    def _leave(
        self,
        flight: Flight,
        cursor: context.BatchCursor,
        settle: Settle,
        started: float,
        event: Optional[JobEvent],
        failure: Optional[BaseException],
        count: bool = True,
    ) -> tuple[Settle, bool]:
        """A job ends (still in its context): ``settle`` is counted for the metrics
        (``started``: its perf_counter start; not without ``count``), and the
        ``on_failure``/``after_job`` hooks run, before its outcome is recorded; its
        context then refuses reports (one kept past its job) and its record is let
        go. Returns what records its outcome, and whether it reported progress
        (whose report is deleted as it ends)."""
        metrics = self.sync.metrics
        if metrics is not None and count:
            elapsed_s = time.perf_counter() - started
            settle = counted(metrics, flight.queue, flight.job, settle, elapsed_s)
        if event is not None:
            settle = self.sync.hooks.ended(event, settle, failure)
        cursor.index = -1
        record = flight.record
        if self.record_base <= record < self._records_end:
            assert self.slot is not None
            self.slot.let_go(record)
        progress = self.progress
        return settle, progress is not None and (flight.queue, flight.job[0]) in progress.reported

    def _let_go(self, flight: Flight) -> None:
        """Free the master's record of a flight settled from outside its run."""
        if self._holds(flight.record):
            assert self.slot is not None
            self.slot.let_go(flight.record)

    def _record(self, flight: Flight, settle: Settle, reported: bool = False) -> Outcomes:
        """Under the lock: record a flight's outcome (and that its progress report
        ended), and count it out of flight; returns its queue's outcomes."""
        out = self._finished.get(flight.queue)
        if out is None:
            out = self._finished[flight.queue] = Outcomes()
        settle(out)
        if reported:  # collect() says it ended, and its report is deleted
            out.progress_ended.append(flight.job[0])
        self._finished_n += 1
        self._in_flight -= 1
        return out
