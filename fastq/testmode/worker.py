"""Runs a test mode's jobs as a pool's child runs the jobs it claimed.

A pool's child claims a batch (ids and envelopes), decodes it
(``codec.decode_claim``), runs it through its :class:`fastq.runners.sync.SyncRunner`
(the job context of ``fastq.current_job()``, the app's hooks, a kept result,
progress reports, and what became of each job: done, retried, dead or broken, as
:mod:`fastq.runners.settle` decides by the job's policy), and its next round trip
acknowledges those outcomes in Redis. :class:`TestWorker` does the same with one
kept job at a time, in this process: the same decoder, the same runner, and in
place of the round trip :class:`fastq.producer.testmode.QueuedJobs`, which keeps
what the acknowledgement would have written (the result, the runs). A retry runs
again at once, from the envelope the runner wrote for it (its attempts counted,
its error kept), without sleeping its backoff: the test goes on at once, and the
attempt and the outcome of every run are what a pool's would be.

What differs from a pool, by design: the jobs run one at a time in the calling
thread (``async def`` ones in a fresh event loop each), with no lease, heartbeat,
timeout (SIGALRM belongs to the test runner) nor rate limit (Redis' scripts
hold those).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

import orjson

from fastq._accel import codec
from fastq.context import ProgressBuffer
from fastq.hooks import BROKEN, DONE, RETRIED, Hooks, outcome_of
from fastq.producer.testmode import JobRun, QueuedJob, QueuedJobs
from fastq.protocol.outcomes import Outcomes
from fastq.runners.sync import SyncRunner

if TYPE_CHECKING:
    from fastq.job import JobDef


class ProgressLog(ProgressBuffer):
    """Progress reports as a worker's runner hands them over, kept in order in the
    test mode's :attr:`QueuedJobs.progress` (no lease thread sends them)."""

    def __init__(self) -> None:
        super().__init__()
        self.into: Optional[QueuedJobs] = None

    def report(self, queue: str, job_id: bytes, value: bytes) -> None:
        super().report(queue, job_id, value)
        if self.into is not None:
            decoded = orjson.loads(value)
            reports = self.into.progress.setdefault(job_id.decode(), [])
            reports.append((decoded["fraction"], decoded["meta"]))


class TestWorker:
    """Runs the jobs of one test mode, each to its end, through a worker's runner.

    Args:
        registry: the app's jobs by name (read at each run: a job registered
            inside the test mode's block runs too).
        hooks: the app's.
    """

    __test__ = False  # not a pytest test class
    # the runner's owner: read before each job of a batch; a test mode never stops
    stopping = False

    def __init__(self, registry: Mapping[str, JobDef[Any]], hooks: Hooks) -> None:
        self.registry = registry
        self.progress = ProgressLog()
        self.runner = SyncRunner(self, None, self.progress, hooks)
        self._views: dict[JobDef[Any], JobDef[Any]] = {}
        # what the job in hand returned and raised, as its view's function saw it:
        # one slot per job in hand (an eager job's enqueue runs another within it)
        self._slots: list[list[Any]] = []

    def run(self, job: QueuedJob, jobs: QueuedJobs) -> JobRun:
        """Run ``job`` until it ends (done, dead or broken), each run recorded in
        ``jobs``; returns the last.

        Raises:
            LookupError: the job's name is not registered (a worker would put it
                back for a while, then break it).
            BaseException: what a job let through that is not an ``Exception``
                (a ``SystemExit``, a ``KeyboardInterrupt``), as a worker lets it
                take its process down.
        """
        env = job.envelope
        while True:
            target = self._view(job.name)
            claimed = [job.id.encode(), env]  # a claim's reply: id, envelope
            runnable, broken, unknown = codec.decode_claim(claimed, 0, {job.name: target})
            if unknown or not runnable:
                why = broken[0][1] if broken else "unknown"
                error = TypeError(f"job {job.name} {job.id} is broken: {why}")
                run = JobRun(job.id, job.name, job.queue, 1, BROKEN, None, error, str(error))
                return self._ended(jobs, run)
            attempt = runnable[0][4]
            out = Outcomes()
            self.progress.into = jobs
            self._slots.append([None, None])
            try:
                self.runner.run(runnable, out, 0, job.queue)
            finally:
                returned, raised = self._slots.pop()
            outcome = outcome_of(out)
            # the error the worker wrote into the envelope (retried, dead), or why broken
            reason = out.broken[0][1] if out.broken else runnable[0][5].get("error")
            if outcome == DONE:
                reason = None  # a retry's envelope still says why its attempt before failed
            run = JobRun(job.id, job.name, job.queue, attempt, outcome, returned, raised, reason)
            self._ended(jobs, run)
            for job_id, result, _ttl_ms in out.results:  # what the ack would keep
                jobs.kept[job_id.decode()] = orjson.loads(result)
            if outcome != RETRIED:
                return run
            env = out.retry[0][2]  # the retry's envelope: its backoff is not slept

    @staticmethod
    def _ended(jobs: QueuedJobs, run: JobRun) -> JobRun:
        jobs.runs.append(run)
        if run.outcome == DONE:
            jobs.results[run.id] = run.returned
        return run

    def _view(self, name: str) -> JobDef[Any]:
        """The job definition of ``name`` as this worker runs it: the app's, its
        function watched for what it returns or raises, and no rate key."""
        jobdef = self.registry.get(name)
        if jobdef is None:
            raise LookupError(
                f"job {name!r} is not registered in this app (a worker would break it)"
            )
        view = self._views.get(jobdef)
        if view is None:
            view = copy.copy(jobdef)
            view.fn = self._watched(jobdef.fn)
            view.rate_key = None  # rate limits live in Redis' scripts
            self._views[jobdef] = view
        return view

    def _watched(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            slot = self._slots[-1]  # this job's: a job it enqueues runs with its own
            try:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):  # an async def job: in a loop of its own
                    result = asyncio.run(result)
            except BaseException as exc:
                slot[:] = [None, exc]
                raise
            slot[:] = [result, None]
            return result

        return watched
