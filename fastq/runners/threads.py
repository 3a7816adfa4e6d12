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
from typing import Callable, Optional

from fastq import context
from fastq.errors import Fail, JobTimeout, Retry
from fastq.job import Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.runners.inflight import Finished, wait_for_free
from fastq.runners.settle import settle_failure
from fastq.runners.sync import SyncRunner
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.shm.metrics import counted

log = logging.getLogger("fastq.worker")

_OUTCOME_TYPES = (Retry, Fail)
_FAILURES = (Exception, JobTimeout)

# A flight's states (under the runner's lock).
WAITING, RUNNING, ENDED = 0, 1, 2


class _Flight:
    """One job handed over."""

    __slots__ = ("job", "queue", "queue_index", "state", "deadline", "timed_out", "record")

    def __init__(self, job: Runnable, queue: str, queue_index: int) -> None:
        self.job = job
        self.queue = queue
        self.queue_index = queue_index
        self.state = WAITING
        self.deadline = 0.0  # monotonic; 0: no timeout
        self.timed_out = False
        self.record = -1  # the master's record it holds while it runs (-1: none)


class ThreadRunner(Finished):
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
    may_claim_ahead = False
    beats_itself = False
    watch: Optional[Callable[[], None]] = None

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
        self.worker_id = worker_id
        self.sync = sync
        self.slot = slot
        self.progress = progress
        self.threads = threads
        self.max_claim = max_claim
        self.record_base = record_base
        # records the master reads: only as many as its board has
        self._records = 0 if slot is None else max(0, min(slot.records - record_base, threads))
        self.on_stuck = on_stuck
        self._cond = cond or threading.Condition(threading.Lock())
        # the watchdog waits on the same lock, not the worker's condition
        self._watch_cond = threading.Condition(self._cond._lock)  # type: ignore[attr-defined]
        self.enough = max(1, min(max_claim, threads) // 4)
        self._todo: queue.SimpleQueue[Optional[_Flight]] = queue.SimpleQueue()
        # all under the lock
        self._in_flight = 0  # handed over, not ended
        self._stuck = 0  # threads still running a job settled at its timeout
        self._flights: set[_Flight] = set()
        self._timed: set[_Flight] = set()  # running, with a deadline
        self._finished: dict[str, Outcomes] = {}
        self._finished_n = 0
        self._closed = False
        self._pool: list[threading.Thread] = []

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def stuck(self) -> int:
        """Threads written off: still running a job settled at its timeout."""
        return self._stuck

    @property
    def finished_n(self) -> int:
        return self._finished_n

    @property
    def free(self) -> int:
        """Threads free for more jobs (under the lock, or as a hint)."""
        return max(0, self.threads - self._stuck - self._in_flight)

    # -- the worker's thread ---------------------------------------------------------

    def start(self) -> None:
        for i in range(self.threads):
            # daemon: a thread stuck in a job must not keep its process alive
            t = threading.Thread(target=self._serve, args=(i,), name=f"fastq-job-{i}", daemon=True)
            t.start()
            self._pool.append(t)
        threading.Thread(target=self._watch_timeouts, name="fastq-timeouts", daemon=True).start()

    def claim_n(self, sized_n: int, stopping: Callable[[], bool]) -> int:
        """At most the free threads, once enough are free."""
        with self._cond:
            free = wait_for_free(self._cond, lambda: self.free, self.enough, stopping)
        return min(self.max_claim, free)

    def launch(
        self, runnable: list[Runnable], out: Outcomes, queue_index: int, queue: str
    ) -> list[Runnable]:
        rest: list[Runnable] = []
        flights: list[_Flight] = []
        sync = self.sync
        for job in runnable:
            target = job[1]
            if target.is_async or target.at_most_once:
                rest.append(job)  # at-most-once: taken and run in the worker's thread
            elif target.rate_key is not None and sync._waits(out, queue, target.rate_key, job):
                continue  # rescheduled to its key's token
            else:
                flights.append(_Flight(job, queue, queue_index))
        if flights:
            with self._cond:
                self._in_flight += len(flights)
                self._flights.update(flights)
            for flight in flights:  # more than the free threads (a mixed batch): they wait
                self._todo.put(flight)
        return rest

    def measured(self) -> tuple[float, int]:
        return 0.0, 0  # it claims its free threads: the batch sizer is not asked

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
                    self.worker_id(), running,
                )  # fmt: skip
            for flight in list(self._flights):
                if flight.state == WAITING:
                    self._settle(flight, _unstarted(flight.job[0]))
                else:
                    self._settle(flight, _interrupted(flight.job[0]))
                    self._let_go(flight)
            self._watch_cond.notify()
        for _ in self._pool:
            self._todo.put(None)  # idle threads end; busy ones are daemons
        return self.collect(pending)

    # -- the job threads ---------------------------------------------------------------

    def _serve(self, index: int) -> None:
        record = self.record_base + index if index < self._records else -1
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
        record = flight.record
        if record >= 0:
            assert self.slot is not None
            self.slot.hold(record, flight.queue_index, job_id)
        cursor = context.BatchCursor(flight.queue, [job], self.progress)
        cursor.index = 0
        token = context.enter_batch(cursor)
        settle: Callable[[Outcomes], None]
        hooks = self.sync.hooks
        event = hooks.started(job, flight.queue) if hooks.per_job else None
        failure: Optional[BaseException] = None
        started = time.perf_counter()
        try:
            result = target.fn(*args, **kwargs)
        except _FAILURES as exc:
            settle, failure = _failed(job, exc), exc
        except BaseException as exc:  # a SystemExit of the job's own: counted a stall
            settle, failure = (lambda out: out.stalled.append(job_id)), exc
        else:
            if result is not None and isinstance(result, _OUTCOME_TYPES):
                settle, failure = _failed(job, result), result
            elif target.result_ttl_ms is None:
                settle = lambda out: out.done.append(job_id)  # noqa: E731
            else:
                ttl_ms = target.result_ttl_ms
                settle = lambda out: SyncRunner._keep(out, job, result, ttl_ms)  # noqa: E731
        finally:
            metrics = self.sync.metrics
            if metrics is not None:
                elapsed_s = time.perf_counter() - started
                settle = counted(metrics, flight.queue, job, settle, elapsed_s)
            if event is not None:  # its hooks run in the job's context, before its record
                settle = hooks.ended(event, settle, failure)
            cursor.index = -1  # a context kept past its job refuses reports
            context.leave(token)
        progress = self.progress
        reported = progress is not None and (flight.queue, job_id) in progress.reported
        if record >= 0:
            assert self.slot is not None
            self.slot.let_go(record)
        with self._cond:
            if flight.state == ENDED:  # settled at its timeout, or handed back by close()
                if flight.timed_out:
                    self._stuck -= 1
                    log.warning(
                        "worker %s: %s ended %.1f s past its timeout; its outcome is ignored",
                        self.worker_id(), _name(flight), time.monotonic() - flight.deadline,
                    )  # fmt: skip
                return
            self._timed.discard(flight)
            self._settle(flight, settle)
            if reported:
                self._finished[flight.queue].progress_ended.append(job_id)

    def _settle(self, flight: _Flight, settle: Callable[[Outcomes], None]) -> None:
        """Record an outcome and free the flight's place (under the lock)."""
        flight.state = ENDED
        self._flights.discard(flight)
        out = self._finished.get(flight.queue)
        if out is None:
            out = self._finished[flight.queue] = Outcomes()
        settle(out)
        self._finished_n += 1
        self._in_flight -= 1
        self._cond.notify()

    def _let_go(self, flight: _Flight) -> None:
        """Free the master's record of a running flight settled from outside its thread."""
        if flight.record >= 0:
            assert self.slot is not None
            self.slot.let_go(flight.record)

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
                        self._settle(flight, _failed(flight.job, exc))
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
                self.worker_id(), _name(flight), flight.job[1].policy.timeout_s or 0.0,
            )  # fmt: skip
        if self.on_stuck is not None:
            self.on_stuck()


def _name(flight: _Flight) -> str:
    job_id, target = flight.job[0], flight.job[1]
    return f"job {job_id.decode()} ({target.name})"


def _unstarted(job_id: bytes) -> Callable[[Outcomes], None]:
    return lambda out: out.unstarted.append(job_id)


def _interrupted(job_id: bytes) -> Callable[[Outcomes], None]:
    return lambda out: out.interrupted.append(job_id)


def _failed(job: Runnable, exc: BaseException) -> Callable[[Outcomes], None]:
    job_id, target, args, kwargs, attempt, env = job
    return lambda out: settle_failure(out, job_id, target, args, kwargs, attempt, env, exc)
