"""Users' hooks around jobs and workers (``@app.before_job``, ``@app.after_job``,
``@app.on_failure``, ``@app.on_worker_start``, ``@app.on_worker_stop``).

A job hook gets one :class:`JobEvent`. ``after_*`` hooks run in the reverse order
of their registration (the last registered wraps closest to the job, as context
managers nest). A job hook that raises is logged, with its name, and changes
nothing: the job's outcome is recorded as it would have been without hooks.

The runners pay nothing when no job hook is registered: a job definition is then
"plain" and run by the native loop (:mod:`fastq.runners.sync`); with hooks, every job goes
through :meth:`Hooks.started` and :meth:`Hooks.ended`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from fastq.protocol.keys import logical_queue
from fastq.protocol.outcomes import Outcomes

if TYPE_CHECKING:
    from fastq.job import Runnable

log = logging.getLogger("fastq.hooks")
jobs_log = logging.getLogger("fastq.jobs")  # per-job lines, at DEBUG only

JobHook = Callable[["JobEvent"], None]
WorkerHook = Callable[[], None]

DONE, RETRIED, DEAD, BROKEN, STALLED = "done", "retried", "dead", "broken", "stalled"


class JobEvent:
    """A job as its hooks see it.

    ``outcome`` (None in ``before_job``): ``"done"``, ``"retried"`` (it failed and
    runs again), ``"dead"`` (it failed for good, in the dead set), ``"broken"``
    (quarantined: its arguments do not fit the function) or ``"stalled"`` (it let a
    SystemExit or the like through: it runs again). ``exc``: what it raised (or the
    ``Retry``/``Fail`` it returned), else None. ``duration_s``: how long it ran.
    """

    __slots__ = (
        "job_id",
        "name",
        "queue",
        "args",
        "kwargs",
        "attempt",
        "outcome",
        "exc",
        "duration_s",
        "_started",
    )

    def __init__(self, job: Runnable, queue: str) -> None:
        job_id, target, args, kwargs, attempt, _ = job
        self.job_id: str = job_id.decode()
        self.name: str = target.name
        self.queue = logical_queue(queue)  # a sharded queue's name, not its shard's
        self.args: list[Any] = args
        self.kwargs: dict[str, Any] = kwargs
        self.attempt: int = attempt
        self.outcome: Optional[str] = None
        self.exc: Optional[BaseException] = None
        self.duration_s = 0.0
        self._started = time.perf_counter()

    def __repr__(self) -> str:
        return f"<JobEvent {self.name} {self.job_id} {self.outcome or 'running'}>"


class Hooks:
    """The hooks an app registered."""

    def __init__(self) -> None:
        self.before_job: list[JobHook] = []
        self.after_job: list[JobHook] = []
        self.on_failure: list[JobHook] = []
        self.worker_start: list[WorkerHook] = []
        self.worker_stop: list[WorkerHook] = []

    @property
    def per_job(self) -> bool:
        """Does any hook run around each job? (if not, jobs may run plain)"""
        return bool(self.before_job or self.after_job or self.on_failure)

    def started(self, job: Runnable, queue: str) -> JobEvent:
        """Run the ``before_job`` hooks; the event to hand to :meth:`ended`."""
        event = JobEvent(job, queue)
        for hook in self.before_job:
            _call(hook, event)
        event._started = time.perf_counter()  # the job's own time, not its hooks'
        return event

    def ended(
        self,
        event: JobEvent,
        settle: Callable[[Outcomes], None],
        exc: Optional[BaseException],
    ) -> Callable[[Outcomes], None]:
        """Settle the job aside to learn its outcome, run the ``on_failure`` and
        ``after_job`` hooks, and return what records that outcome (as ``settle``
        would have). The hooks run before the caller records it, outside its locks."""
        event.duration_s = time.perf_counter() - event._started
        event.exc = exc
        aside = Outcomes()
        settle(aside)
        event.outcome = outcome_of(aside)
        if event.outcome != DONE:
            for hook in reversed(self.on_failure):
                _call(hook, event)
        for hook in reversed(self.after_job):
            _call(hook, event)
        return lambda out: out.extend(aside)

    def with_last_after(self, hook: JobHook) -> Hooks:
        """A copy of these hooks with ``hook`` run after every other ``after_job``."""
        copy = Hooks()
        for name, hooks in vars(self).items():
            setattr(copy, name, list(hooks))
        copy.after_job.insert(0, hook)
        return copy

    def run_worker_stop(self) -> None:
        for hook in reversed(self.worker_stop):
            _call(hook)


def _call(hook: Callable[..., None], *args: Any) -> None:
    try:
        hook(*args)
    except Exception:
        name = getattr(hook, "__qualname__", None) or repr(hook)
        log.exception("hook %s raised; the job's outcome stands", name)


def outcome_of(out: Outcomes) -> str:
    """The outcome of the one job settled in ``out``."""
    if out.done:
        return DONE
    if out.retry:
        return RETRIED
    if out.dead:
        return DEAD
    if out.broken:
        return BROKEN
    return STALLED


def job_logger(event: JobEvent) -> None:
    """An ``after_job`` hook: one DEBUG line per job run."""
    jobs_log.debug(
        "job %s %s %s in %.3fs (attempt %d)%s",
        event.name,
        event.job_id,
        event.outcome,
        event.duration_s,
        event.attempt,
        "" if event.exc is None else f": {type(event.exc).__name__}: {event.exc}",
        extra={"queue": event.queue, "job": event.name, "job_id": event.job_id},
    )
