"""Runners execute the jobs of a claimed batch and record what became of each.

The seam between a worker's loop and how its jobs run: the sync runner here runs
them one after another in the worker's thread; the asyncio and thread runners
(many jobs in flight per child, ``fastq/runners/aio.py``, ``fastq/runners/threads.py``) fit behind
the same ``run()`` (``fastq/runners/slots.py``).
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from fastq import context
from fastq._accel import codec
from fastq._accel import runner as _loop
from fastq.circuit import CircuitKey, Circuits
from fastq.errors import Fail, JobTimeout, ResultNotSerializable, Retry
from fastq.hooks import Hooks
from fastq.job import Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.protocol.results import encode_result
from fastq.ratelimit import KeyGate, RateKey
from fastq.runners.settle import note_circuit, settle_failure
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.shm.metrics import ChildMetrics, lengths
from fastq.validate import SLOT_FIELD

if TYPE_CHECKING:
    from fastq.job import JobDef

_OUTCOME_TYPES = (Retry, Fail)
_FAILURES = (Exception, JobTimeout)  # what a job raises that its policy settles


class HardStop(BaseException):
    """Raised inside a running job by the operator's second stop signal."""


class Stoppable(Protocol):
    stopping: bool


class SyncRunner:
    """Runs a batch's jobs one by one in this thread.

    Args:
        owner: its ``stopping`` is read before each job (an attribute, not a call:
            this is per job); once true, the rest of the batch is handed back
            unstarted.
        slot: the master's heartbeat slot, told which job runs (and until when).
        progress: where ``current_job().set_progress()`` reports go (the lease
            thread sends them); None: reports are checked and dropped.
        hooks: the app's; while any runs per job, no job is plain.

    ``alarms``: set once the owner installed ``on_alarm`` as its SIGALRM handler;
    only then is a job's ``timeout_s`` enforced.
    """

    def __init__(
        self,
        owner: Stoppable,
        slot: Optional[HeartbeatSlot],
        progress: Optional[context.ProgressBuffer] = None,
        hooks: Optional[Hooks] = None,
    ) -> None:
        self.owner = owner
        self.hooks = hooks if hooks is not None else Hooks()
        # counts its jobs for a pool's /metrics, per batch (None: no metrics)
        self.metrics: Optional[ChildMetrics] = None
        self.slot = slot
        self.progress = progress
        self.alarms = False
        # reserves the tokens of per-key rate limits (set once connected)
        self.gate: Optional[KeyGate] = None
        self.circuits: Optional[Circuits] = None  # set with the gate
        # is a job definition plain (run by the native loop itself)? decided once
        self._plain: dict[JobDef[Any], bool] = {}
        self._in_job = False
        self._timeout_s = 0.0
        # the batch running now, for the long-job watch's thread to hand back the
        # jobs waiting behind a long one (hand_back_rest)
        self.cursor: Optional[context.BatchCursor] = None

    def hand_back_rest(self, cursor: context.BatchCursor, index: int) -> list[Runnable]:
        """From another thread: cut the jobs after job ``index`` from the batch of
        ``cursor`` if it is still running that job; returns them (not run here)."""
        rest: list[Runnable] = _loop.hand_back_rest(cursor, index)
        return rest

    def on_alarm(self, signum: int, frame: Optional[FrameType]) -> None:
        """The SIGALRM handler: a job ran past its timeout."""
        if self._in_job:  # not if the job finished just before the alarm
            raise JobTimeout(f"the job ran past its timeout_s={self._timeout_s:g}")

    def run(
        self,
        runnable: list[Runnable],
        out: Outcomes,
        queue_index: int,
        queue: str = "",
        *,
        cuttable: bool = True,
    ) -> int:
        """Run the jobs, recording their outcomes in ``out``; returns how many
        started (or were rescheduled to the token of their rate key). Jobs not
        started when a stop comes are handed back unstarted. ``cuttable``: the
        jobs behind a long one may be handed back from another thread
        (:meth:`hand_back_rest`); not a batch with taken at-most-once jobs, which
        only its own settling can give back.

        Raises:
            HardStop (or any BaseException a job let through): the job in hand is
                recorded as interrupted (stalled for anything but a HardStop) and
                the rest as unstarted before it propagates.
        """
        # the job context: set once per batch, moved per job by one attribute store
        # (run_jobs leaves it on the job in hand, which is how a stop is placed)
        cursor = context.BatchCursor(queue, runnable, self.progress)
        token = context.enter_batch(cursor)
        self.cursor = cursor if cuttable else None
        i = 0
        job_at_fault = False
        metrics = self.metrics
        if metrics is not None:
            before, started = lengths(out), time.perf_counter()
        try:
            reached: int = _loop.run_jobs(
                runnable,
                out,
                self.owner,
                cursor,
                self.slot,
                queue,
                queue_index,
                self._plain,
                self._is_plain,
                self._run_one,
                settle_failure,
                _FAILURES,
                _OUTCOME_TYPES,
            )
            i = max(cursor.index, 0)
            if metrics is not None:
                ran = runnable if reached == len(runnable) else runnable[:reached]
                metrics.batch(queue, ran, out, before, time.perf_counter() - started)
            if reached < len(runnable):
                out.unstarted.extend(job[0] for job in runnable[reached:])
                return reached
        except HardStop:
            # the operator's: the job is not at fault, and is not counted a stall
            i = max(cursor.index, 0)
            out.interrupted.append(runnable[i][0])
            out.unstarted.extend(job[0] for job in runnable[i + 1 :])
            raise
        except BaseException as exc:
            # interrupted mid-job (SystemExit, a KeyboardInterrupt of a job's own):
            # the worker goes down with it, and the master's slot keeps naming it,
            # so that the master knows a job took its child down (no crash loop)
            i = max(cursor.index, 0)
            out.stalled.append(runnable[i][0])
            out.stalled_cause = f"exited: the job raised {exc!r}"
            out.unstarted.extend(job[0] for job in runnable[i + 1 :])
            job_at_fault = True
            raise
        finally:
            self.cursor = None
            cursor.index = -1  # a context kept past its job refuses reports
            context.leave(token)
            if self.slot is not None and not job_at_fault:
                self.slot.idle()
            progress = self.progress
            if progress is not None and progress.reported:  # a job of it reported
                out.progress_ended += progress.ended(queue, [job[0] for job in runnable[: i + 1]])
        return len(runnable)

    def _is_plain(self, target: JobDef[Any]) -> bool:
        """A job run by the loop itself: no rate key, no timeout, no result kept,
        no hook."""
        return (
            not self.hooks.per_job
            and target.rate_key is None
            and target.circuit is None
            and target.policy.timeout_s is None
            and target.result_ttl_ms is None
        )

    def _run_one(self, out: Outcomes, queue: str, queue_index: int, job: Runnable) -> None:
        """Run a job that is not plain: its gates (circuit, rate key), its hooks, its
        timeout, its result. A circuit's failure is reported at once: the circuit
        may open before the rest of the batch starts."""
        if self.gated(out, queue, job):
            return
        self._run_gated(out, queue, queue_index, job)
        outcomes = out.circuit_outcomes
        if outcomes and not outcomes[-1][2] and self.circuits is not None:
            self.circuits.report(outcomes)
            outcomes.clear()

    def _run_gated(self, out: Outcomes, queue: str, queue_index: int, job: Runnable) -> None:
        hooks = self.hooks
        if not hooks.per_job:
            self._run_bare(out, queue_index, job, job[1].fn)
            return
        event = hooks.started(job, queue)
        fn = job[1].fn
        failure: list[BaseException] = []

        def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                failure.append(exc)
                raise
            if result is not None and isinstance(result, _OUTCOME_TYPES):
                failure.append(result)
            return result

        aside = Outcomes()
        try:
            self._run_bare(aside, queue_index, job, watched)
        except BaseException:
            out.extend(aside)  # nothing settled; the caller records the interruption
            raise
        exc = failure[0] if failure else None
        hooks.ended(event, lambda into: into.extend(aside), exc)(out)

    def _run_bare(
        self, out: Outcomes, queue_index: int, job: Runnable, fn: Callable[..., Any]
    ) -> None:
        """Run a job with its timeout and keep its result, recording its outcome."""
        job_id, target, args, kwargs, attempt, env = job
        timeout_s = target.policy.timeout_s
        if self.slot is not None:
            self.slot.start_job(queue_index, job_id, timeout_s)
        started = time.monotonic()
        try:
            if timeout_s is not None and self.alarms:
                result = self._run_with_timeout(fn, args, kwargs, timeout_s)
            else:
                result = fn(*args, **kwargs)
        except _FAILURES as exc:
            settle_failure(out, job_id, target, args, kwargs, attempt, env, exc)
            return
        if result is not None and isinstance(result, _OUTCOME_TYPES):
            settle_failure(out, job_id, target, args, kwargs, attempt, env, result)
            return
        run_ms = int((time.monotonic() - started) * 1000.0)
        if target.result_ttl_ms is None:
            note_circuit(out, target, args, kwargs, True)
            out.note_done(job_id, run_ms, attempt)
            if self.slot is not None:
                self.slot.finished(queue_index, job_id)
        else:  # not noted finished: after a kill it runs again, so its result is kept
            self._keep(out, job, result, target.result_ttl_ms, run_ms)

    def gated(self, out: Outcomes, queue: str, job: Runnable) -> bool:
        """The gates of a job about to start: its circuit breaker, then its rate key's
        token. True: it waits (rescheduled, no attempt counted); it is not run."""
        target = job[1]
        circuit = target.circuit
        if circuit is not None and self._circuit_waits(out, circuit, job):
            return True
        rate_key = target.rate_key
        return rate_key is not None and self._waits(out, queue, rate_key, job)

    def _circuit_waits(self, out: Outcomes, circuit: CircuitKey, job: Runnable) -> bool:
        """Check the job's circuit. True: it is open (or another job probes it), and
        the job is rescheduled to when it may close, no attempt counted."""
        job_id, target, args, kwargs, _, env = job
        key = circuit.key_for(args, kwargs)
        if key is None:
            return False  # its arguments do not fit: it fails as broken
        circuits = self.circuits
        assert circuits is not None, "a worker sets its runner's circuits once connected"
        wait_ms = circuits.wait_ms(circuit, key, target.policy.timeout_s)
        if wait_ms <= 0:
            return False
        out.retry.append((job_id, wait_ms, codec.update_envelope(env, {})))
        return True

    def _waits(self, out: Outcomes, queue: str, rate_key: RateKey, job: Runnable) -> bool:
        """Reserve the token of the job's rate key. True: it is due later, and the job
        is rescheduled to then (no attempt counted), to start without another."""
        job_id, _, args, kwargs, _, env = job
        if env.pop(SLOT_FIELD, None) is not None:
            return False  # back in the slot reserved for it
        gate = self.gate
        assert gate is not None, "a worker sets its runner's gate once connected"
        wait_ms = gate.wait_ms(queue, rate_key, args, kwargs)
        if wait_ms <= 0:
            return False
        out.retry.append((job_id, wait_ms, codec.update_envelope(env, {SLOT_FIELD: wait_ms})))
        env.pop(SLOT_FIELD)
        return True

    @staticmethod
    def _keep(out: Outcomes, job: Runnable, result: Any, ttl_ms: int, run_ms: int = 0) -> None:
        """A job kept for its result succeeded (its run ``run_ms`` long): done, with
        its return value kept; a value JSON cannot hold fails the job (retried or
        buried by its policy)."""
        job_id, target, args, kwargs, attempt, env = job
        try:
            encoded = encode_result(result)
        except ResultNotSerializable as exc:
            settle_failure(out, job_id, target, args, kwargs, attempt, env, exc)
            return
        note_circuit(out, target, args, kwargs, True)
        out.note_done(job_id, run_ms, attempt)
        out.results.append((job_id, encoded, ttl_ms))

    def _run_with_timeout(
        self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], timeout_s: float
    ) -> Any:
        self._timeout_s = timeout_s
        self._in_job = True
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn(*args, **kwargs)
        finally:
            self._in_job = False
            signal.setitimer(signal.ITIMER_REAL, 0)
