"""``async def`` jobs, up to N in flight per worker, on an event loop of their own.

The worker's loop stays where it was (its thread, its pipelined round trips on one
hiredis connection): it claims at most the free slots, hands the async jobs of a
batch over here with one thread-safe call, and collects the outcomes of those that
finished into its next round trip, which settles many and claims more. The event
loop (uvloop when installed) runs in a thread of its own: a slow job never blocks a
claim, and a round trip never blocks a job. Sync jobs of the same app run in the
worker's thread, to completion, as they do without ``--concurrency``.

Each job runs in a task of its own, with its own job context (``current_job()``),
its ``timeout_s`` enforced by cancelling it (a JobTimeout, retried by its policy).
Each holds one of the master's in-flight records while it runs, so a child that
dies gives every job it held back at once, counted a stall. The master's
heartbeat comes from a task of this loop: a job that blocks the loop (a blocking
call in an ``async def``) silences it, and the master replaces the child; the
heartbeat thread names the job while the loop is stuck.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
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
from fastq.runners.slots import WAIT_TICK_S
from fastq.runners.sync import SyncRunner
from fastq.shm.heartbeat import HeartbeatSlot

log = logging.getLogger("fastq.worker")

# How often the loop stamps the master's slot, and measures its own lag.
BEAT_S = 0.2
# A loop late by more than this is said blocked (in the log, naming the job).
LAG_WARN_S = 0.5
# A stop cancels the jobs still in flight, and waits this long for them to end.
CANCEL_PATIENCE_S = 2.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's when installed (``pip install fastq[uvloop]``), else asyncio's."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


class _Flight(Flight):
    """One job in flight: a task of the loop, once a slot is its."""

    __slots__ = ("started", "task", "ran_s")

    def __init__(self, job: Runnable, queue: str, queue_index: int) -> None:
        Flight.__init__(self, job, queue, queue_index)
        self.started = False
        self.task: Optional[asyncio.Task[None]] = None
        self.ran_s = 0.0  # how long it ran (measured with one slot)


class AsyncRunner(FlightRunner):
    """Runs the ``async def`` jobs of a worker, up to ``concurrency`` at once.

    Args:
        worker_id: named in the log.
        sync: the worker's sync runner: its rate-key gate is used here.
        slot: the master's heartbeat slot (beaten from the loop; its in-flight
            records name the jobs held).
        progress: where the jobs' progress reports go.
        concurrency: jobs in flight at most.
        max_claim: the most jobs claimed in one round trip.
    """

    beats_itself = True
    flight_type = _Flight

    def __init__(
        self,
        worker_id: Callable[[], str],
        sync: SyncRunner,
        slot: Optional[HeartbeatSlot],
        progress: Optional[context.ProgressBuffer],
        concurrency: int,
        max_claim: int,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, not {concurrency}")
        # records the master reads: only as many as its board has
        records = 0 if slot is None else min(slot.records, concurrency)
        super().__init__(worker_id, sync, slot, progress, concurrency, max_claim, records)
        self.concurrency = concurrency
        # with one slot, the batch sizer's figure: the sync jobs of a batch run in the
        # worker's thread, and its async jobs one after another (see claim_n)
        self.sized = concurrency == 1
        # the worker's thread waits on it (shared with a thread runner: runners.mixed.Mixed)
        self.cond = self._cond
        # a slot each, under _cond: a flight's record is its slot (one slot: a flight
        # handed over while the slot is taken waits for it, record -1)
        self._free_records = list(range(concurrency - 1, -1, -1))
        # the jobs' run time and count since measured() (one slot only), under _cond
        self._ran_s = 0.0
        self._ran_n = 0
        self._flights: dict[asyncio.Task[None], _Flight] = {}  # the loop's thread only
        # handed over, waiting for a slot (one slot only: see claim_n); the loop's thread
        self._waiting: deque[_Flight] = deque()
        self._cancelling = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._last_tick = 0.0
        self._warned = False

    @property
    def free(self) -> int:
        """Slots free for more jobs (under the lock, or as a hint)."""
        return max(0, self.concurrency - self._in_flight)

    @staticmethod
    def takes(target: JobDef[Any]) -> bool:
        return target.is_async

    # -- the worker's thread -------------------------------------------------------

    def start(self) -> None:
        loop = new_event_loop()
        ready = threading.Event()
        self._loop = loop
        self._last_tick = time.monotonic()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            beat = loop.create_task(self._beat())
            try:
                loop.run_forever()
            finally:
                beat.cancel()
                loop.run_until_complete(asyncio.gather(beat, return_exceptions=True))
                loop.close()

        self._thread = threading.Thread(target=main, name="fastq-aio", daemon=True)
        self._thread.start()
        ready.wait()

    def _hand_over(self, flights: list[_Flight]) -> None:
        with self._cond:
            self._in_flight += len(flights)
            free_records = self._free_records
            for flight in flights:  # -1: waits for a free slot (one slot only)
                flight.record = free_records.pop() if free_records else -1
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._start_all, flights)

    def measured(self) -> tuple[float, int]:
        """With one slot, the batch sizer sizes the claims: it measures the jobs
        run one after another here as it does the batches the worker runs."""
        with self._cond:
            ran = self._ran_s, self._ran_n
            self._ran_s, self._ran_n = 0.0, 0
        return ran

    def close(self, pending: dict[str, Outcomes]) -> int:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return 0
        if self._in_flight:
            log.info(
                "worker %s: cancelling %d jobs in flight; they go back to their queue",
                self.worker_id(),
                self._in_flight,
            )
            loop.call_soon_threadsafe(self._cancel_all)
            deadline = time.monotonic() + CANCEL_PATIENCE_S
            with self._cond:
                while self._in_flight and time.monotonic() < deadline:
                    self._cond.wait(WAIT_TICK_S)
        n = self.collect(pending)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CANCEL_PATIENCE_S)
        self._loop = self._thread = None
        return n

    def watch(self) -> None:
        """From the heartbeat thread: a loop that has not ticked for LAG_WARN_S is
        blocked by a job; say which, once per block."""
        loop = self._loop
        blocked_s = time.monotonic() - self._last_tick - BEAT_S
        if loop is None or blocked_s < LAG_WARN_S or self._warned:
            return
        self._warned = True
        task = asyncio.current_task(loop)
        flight = self._flights.get(task) if task is not None else None
        what = name(flight) if flight is not None else "no job (the loop itself)"
        if flight is not None and self._holds(flight.record):
            assert self.slot is not None
            self.slot.blame(flight.record)  # if the master kills us, this one stalled
        log.warning(
            "worker %s: its event loop has been blocked for %.1f s by %s; a blocking "
            "call in an async def job? The master replaces a child silent past its "
            "--child-timeout",
            self.worker_id(),
            blocked_s,
            what,
        )

    # -- the loop's thread -----------------------------------------------------------

    async def _beat(self) -> None:
        slot = self.slot
        while True:
            before = time.monotonic()
            await asyncio.sleep(BEAT_S)
            now = time.monotonic()
            self._last_tick = now
            if slot is not None:
                slot.beat()
            lag_s = now - before - BEAT_S
            if lag_s > LAG_WARN_S:
                log.warning(
                    "worker %s: its event loop was blocked for %.1f s; running: %s",
                    self.worker_id(),
                    lag_s,
                    ", ".join(name(f) for f in self._flights.values() if f.started) or "none",
                )
            self._warned = False

    def _start_all(self, flights: list[_Flight]) -> None:
        for flight in flights:
            if flight.record < 0:
                self._waiting.append(flight)
            else:
                self._start(flight)

    def _start(self, flight: _Flight) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._run(flight))
        flight.task = task
        self._flights[task] = flight

    def _cancel_all(self) -> None:
        self._cancelling = True
        while self._waiting:
            flight = self._waiting.popleft()
            self._end(flight, unstarted(flight.job[0]))
        for task, flight in list(self._flights.items()):
            task.cancel()
            if not flight.started:  # cancelled before its first step: its body never runs
                del self._flights[task]
                self._end(flight, unstarted(flight.job[0]))

    async def _run(self, flight: _Flight) -> None:
        flight.started = True
        job_id, target, args, kwargs, attempt, env = job = flight.job
        task = flight.task
        assert task is not None
        timeout_s = target.policy.timeout_s
        timer = None
        if timeout_s is not None:
            assert self._loop is not None
            timer = self._loop.call_later(timeout_s, self._time_out, flight)
        # this task's own job context (a task runs in a copy of its creator's)
        cursor, _, event = self._enter(flight)
        settle: Settle
        failure: Optional[BaseException] = None
        count = True
        started = time.perf_counter()
        try:
            result = await target.fn(*args, **kwargs)
        except asyncio.CancelledError as exc:
            if flight.timed_out:
                failure = JobTimeout(f"the job ran past its timeout_s={timeout_s:g}")
                settle = failed(job, failure)
            elif self._cancelling:  # a stop: not the job's fault, back to the front
                settle, count = interrupted(job_id), False
                event = None  # it runs again: no outcome yet, nothing counted
            else:  # cancelled by something of its own
                settle, failure = failed(job, exc), exc
        except Exception as exc:
            settle, failure = failed(job, exc), exc
        except BaseException as exc:
            # a SystemExit or KeyboardInterrupt of the job's own: counted a stall
            del self._flights[task]  # first: the watch no longer names it
            ended = self._leave(flight, cursor, stalled(job_id), started, event, exc)
            self._end(flight, *ended, timer)
            raise
        else:
            settle, failure = returned(job, result, int((time.perf_counter() - started) * 1000))
        if self.concurrency == 1:
            flight.ran_s = time.perf_counter() - started
        del self._flights[task]
        settle, reported = self._leave(flight, cursor, settle, started, event, failure, count)
        self._end(flight, settle, reported, timer)

    def _time_out(self, flight: _Flight) -> None:
        flight.timed_out = True
        assert flight.task is not None
        flight.task.cancel()

    def _end(
        self,
        flight: _Flight,
        settle: Settle,
        reported: bool = False,
        timer: Optional[asyncio.TimerHandle] = None,
    ) -> None:
        """Record a job's outcome and free its slot (the loop's thread), once it left
        ``_flights`` and its context (_leave); ``reported``: it reported progress (a
        flight that never started did not, and held no record)."""
        if timer is not None:
            timer.cancel()
        cond = self._cond
        after: Optional[_Flight] = None
        with cond:
            self._record(flight, settle, reported)
            if flight.ran_s:
                self._ran_s += flight.ran_s
                self._ran_n += 1
            if self._waiting and flight.record >= 0:
                after = self._waiting.popleft()  # the slot goes to the next waiting job
                after.record = flight.record
            elif flight.record >= 0:
                self._free_records.append(flight.record)
            free = self.concurrency - self._in_flight
            # wake the worker's thread when it has something to do: the first job
            # finished since it collected, the first free slot, enough free to claim,
            # the last job of a drain
            if self._finished_n == 1 or free == 1 or free == self.enough or not self._in_flight:
                cond.notify()
        if after is not None and not self._cancelling:
            self._start(after)
