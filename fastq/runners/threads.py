"""Sync jobs in a pool of N threads per worker (``--threads N``), up to N in flight.

The worker's loop stays in its thread: it claims at most the free threads, hands
the sync jobs of a batch over here, and collects the outcomes of those that
finished into its next round trip, as for ``async def`` jobs (:mod:`fastq.runners.aio`).
Each thread holds one of the master's in-flight records (thread i: record
``record_base + i``) while it runs a job, so a child that dies gives every job it
held back at once, counted a stall; jobs handed over and not yet started hold no
record and come back with the other leases. Each thread has its own job context
(``current_job()``, progress): a thread starts with a context of its own.

A thread cannot be killed. A job past its ``timeout_s`` is settled then, as its
retry policy says for a JobTimeout (retried or dead), and its thread is written
off: what the job does later is ignored, so one claim is never both failed and
acked done (a retry may start elsewhere while it still runs: it is reported, not
stopped). The worker then stops claiming, lets the other jobs finish and exits,
and its master forks a fresh child (``on_stuck``).

At-most-once jobs stay in the worker's thread (:mod:`fastq.worker.atmostonce` takes and
settles them around a run to completion).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from fastq import context
from fastq.errors import JobTimeout
from fastq.job import JobDef, Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.runners.inflight_base import (
    Flight,
    FlightRunner,
    Settle,
    failed,
    interrupted,
    name,
    returned,
    stalled,
    unstarted,
)
from fastq.runners.sync import SyncRunner
from fastq.shm.heartbeat import HeartbeatSlot

log = logging.getLogger("fastq.worker")

_FAILURES = (Exception, JobTimeout)

# A flight's states (under the runner's lock).
WAITING, RUNNING, ENDED = 0, 1, 2


class _Flight(Flight):
    """One job handed over: waiting for a thread, running in one, or ended."""

    __slots__ = ("state", "deadline", "handed_at")

    def __init__(self, job: Runnable, queue: str, queue_index: int) -> None:
        Flight.__init__(self, job, queue, queue_index)
        self.state = WAITING
        self.deadline = 0.0  # monotonic; 0: no timeout
        self.handed_at = 0.0  # monotonic: when it began to wait for a thread


class ThreadRunner(FlightRunner):
    """Runs the sync jobs of a worker in ``threads`` threads.

    Args:
        worker_id: named in the log.
        sync: the worker's sync runner: its rate-key gate is used here.
        slot: the master's heartbeat slot (its in-flight records name the jobs held).
        progress: where the jobs' progress reports go.
        threads: threads, and so jobs running at once.
        max_claim: the most jobs claimed in one round trip.
        record_base: the first in-flight record of the slot that is this runner's.
        cond: the condition the worker's thread waits on (shared with an async
            runner in a mixed app); its lock guards this runner's state too.
        on_stuck: called once a job ran past its timeout (from the watchdog
            thread): the worker stops claiming, drains and exits.
    """

    _where = "in threads"
    beats_itself = False
    watch: Optional[Callable[[], None]] = None
    flight_type = _Flight

    def __init__(
        self,
        worker_id: Callable[[], str],
        sync: SyncRunner,
        slot: Optional[HeartbeatSlot],
        progress: Optional[context.ProgressBuffer],
        threads: int,
        max_claim: int,
        record_base: int = 0,
        cond: Optional[threading.Condition] = None,
        on_stuck: Optional[Callable[[], None]] = None,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, not {threads}")
        # records the master reads: only as many as its board has
        records = 0 if slot is None else max(0, min(slot.records - record_base, threads))
        super().__init__(
            worker_id, sync, slot, progress, threads, max_claim, records, record_base, cond
        )
        self.threads = threads
        self.on_stuck = on_stuck
        # the watchdog waits on the same lock, not the worker's condition
        self._watch_cond = threading.Condition(self._cond._lock)  # type: ignore[attr-defined]
        self._todo: queue.SimpleQueue[Optional[_Flight]] = queue.SimpleQueue()
        # all under the lock
        self._stuck = 0  # threads still running a job settled at its timeout
        self._flights: set[_Flight] = set()
        self._timed: set[_Flight] = set()  # running, with a deadline
        self._closed = False
        self._pool: list[threading.Thread] = []

    @property
    def stuck(self) -> int:
        """Threads written off: still running a job settled at its timeout."""
        return self._stuck

    @property
    def free(self) -> int:
        """Threads free for more jobs (under the lock, or as a hint)."""
        return max(0, self.threads - self._stuck - self._in_flight)

    @staticmethod
    def takes(target: JobDef[Any]) -> bool:
        # at-most-once: taken and run in the worker's thread
        return not (target.is_async or target.at_most_once)

    # -- the worker's thread ---------------------------------------------------------

    def start(self) -> None:
        for i in range(self.threads):
            # daemon: a thread stuck in a job must not keep its process alive
            t = threading.Thread(target=self._serve, args=(i,), name=f"fastq-job-{i}", daemon=True)
            t.start()
            self._pool.append(t)
        threading.Thread(target=self._watch_timeouts, name="fastq-timeouts", daemon=True).start()

    def _hand_over(self, flights: list[_Flight]) -> None:
        now = time.monotonic()
        for flight in flights:
            flight.handed_at = now
        with self._cond:
            self._in_flight += len(flights)
            self._flights.update(flights)
        for flight in flights:  # more than the free threads (a mixed batch): they wait
            self._todo.put(flight)

    def take_waiting(self, after_s: float) -> dict[str, list[bytes]]:
        """The jobs that have waited ``after_s`` for a thread (every thread busy
        with a long job), taken out of the queue of work (by queue)."""
        taken: dict[str, list[bytes]] = {}
        with self._cond:
            if self._in_flight <= self.threads - self._stuck:
                return taken  # a thread for each: none waits
            since = time.monotonic() - after_s
            for flight in [f for f in self._flights if f.state == WAITING]:
                if flight.handed_at <= since:
                    flight.state = ENDED  # a thread that gets it passes it by
                    self._flights.discard(flight)
                    self._in_flight -= 1
                    taken.setdefault(flight.queue, []).append(flight.job[0])
            if taken:
                self._cond.notify()
        return taken

    def close(self, pending: dict[str, Outcomes]) -> int:
        """Hand back what has not finished: those not started as unstarted, the
        running ones as interrupted (their threads run on until the process exits;
        what they do then is ignored)."""
        with self._cond:
            self._closed = True
            running = sum(1 for f in self._flights if f.state == RUNNING)
            if running:
                log.info(
                    "worker %s: %d jobs still running in threads; they go back to their queue",
                    self.worker_id(),
                    running,
                )
            for flight in list(self._flights):
                if flight.state == WAITING:
                    self._settle(flight, unstarted(flight.job[0]))
                else:
                    self._settle(flight, interrupted(flight.job[0]))
                    self._let_go(flight)
            self._watch_cond.notify()
        for _ in self._pool:
            self._todo.put(None)  # idle threads end; busy ones are daemons
        return self.collect(pending)

    # -- the job threads ---------------------------------------------------------------

    def _serve(self, index: int) -> None:
        record = self.record_base + index
        if not self._holds(record):
            record = -1
        while True:
            flight = self._todo.get()
            if flight is None:
                return
            with self._cond:
                if flight.state != WAITING:  # handed back by close()
                    continue
                flight.state = RUNNING
                flight.record = record
                timeout_s = flight.job[1].policy.timeout_s
                if timeout_s is not None:
                    flight.deadline = time.monotonic() + timeout_s
                    self._timed.add(flight)
                    self._watch_cond.notify()
            self._run(flight)

    def _run(self, flight: _Flight) -> None:
        job_id, target, args, kwargs, attempt, env = job = flight.job
        cursor, token, event = self._enter(flight)
        settle: Settle
        failure: Optional[BaseException] = None
        started = time.perf_counter()
        try:
            try:
                result = target.fn(*args, **kwargs)
            except _FAILURES as exc:
                settle, failure = failed(job, exc), exc
            except BaseException as exc:  # a SystemExit of the job's own: counted a stall
                settle, failure = stalled(job_id), exc
            else:
                ran_ms = int((time.perf_counter() - started) * 1000)
                settle, failure = returned(job, result, ran_ms)
            # its hooks run in the job's context, before its record
            settle, reported = self._leave(flight, cursor, settle, started, event, failure)
        finally:
            context.leave(token)
        with self._cond:
            if flight.state == ENDED:  # settled at its timeout, or handed back by close()
                if flight.timed_out:
                    self._stuck -= 1
                    log.warning(
                        "worker %s: %s ended %.1f s past its timeout; its outcome is ignored",
                        self.worker_id(),
                        name(flight),
                        time.monotonic() - flight.deadline,
                    )
                return
            self._timed.discard(flight)
            self._settle(flight, settle, reported)

    def _settle(self, flight: _Flight, settle: Settle, reported: bool = False) -> None:
        """Record an outcome and free the flight's place (under the lock)."""
        flight.state = ENDED
        self._flights.discard(flight)
        self._record(flight, settle, reported)
        self._cond.notify()

    # -- the watchdog --------------------------------------------------------------------

    def _watch_timeouts(self) -> None:
        """Settle each job that runs past its timeout, when it does."""
        stuck: list[_Flight] = []
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                wait_s: Optional[float] = None
                for flight in list(self._timed):
                    if flight.deadline <= now:
                        self._timed.discard(flight)
                        flight.timed_out = True
                        self._stuck += 1
                        timeout_s = flight.job[1].policy.timeout_s or 0.0
                        exc = JobTimeout(f"the job ran past its timeout_s={timeout_s:g}")
                        self._settle(flight, failed(flight.job, exc))
                        self._let_go(flight)
                        stuck.append(flight)
                    else:
                        left = flight.deadline - now
                        wait_s = left if wait_s is None else min(wait_s, left)
                if stuck:
                    self._cond.release()
                    try:
                        self._report(stuck)
                    finally:
                        self._cond.acquire()
                    stuck = []
                    continue
                self._watch_cond.wait(wait_s)

    def _report(self, stuck: list[_Flight]) -> None:
        for flight in stuck:
            log.error(
                "worker %s: %s ran past its timeout_s=%g; settled as timed out, but a "
                "thread cannot be stopped: recycling this worker once its other jobs finish",
                self.worker_id(),
                name(flight),
                flight.job[1].policy.timeout_s or 0.0,
            )
        if self.on_stuck is not None:
            self.on_stuck()
