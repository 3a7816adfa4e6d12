"""A test mode for users' own tests, without Redis: ``app.stub()`` keeps what the
code under test enqueues, for assertions (Dramatiq's ``StubBroker``, Sidekiq's
``Testing.fake!``); ``app.eager()`` runs each job at once, in-process (Celery's
``task_always_eager``, RQ's ``is_async=False``).

An enqueue goes through the app's real producer, given a :class:`MemoryTransport`
instead of Redis: the same argument checks against the job's signature, the same
encoding (a value JSON cannot carry is refused with the same ``TypeError``), the
same size limit and option checks, and the same "unknown queue" refusal. The jobs
are kept here, in :class:`QueuedJobs`, as Redis would keep their envelopes.

A job then runs as a pool's child runs one it claimed: a :class:`JobRunner`
(:class:`fastq.testmode.TestWorker`, which ranks above the app and is given to the
test mode by it) decodes its envelope with the worker's own decoder and runs it
through the worker's own runner, so ``fastq.current_job()``, the app's hooks, the
job's retry policy (its backoff not slept), kept results and progress reports
behave as under a pool; what became of each run is recorded here
(:attr:`QueuedJobs.runs`).

Batches are kept in memory (:mod:`fastq.producer.testbatches`): a job enqueued in
one says so (``QueuedJob.batch``) and is counted as it ends; a batch ends, and its
callbacks are enqueued, once its last job has.

Not here: delays (a job runs when ``run()`` reaches it, or at once in an eager
app; a stub keeps ``due_at``), rate limits, uniqueness locks, timeouts and
at-most-once takes, which live in Redis' scripts or the worker's loop; test those
against a real ``redis-server`` (``fastq.testing.RedisServer``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import orjson

from fastq.admin.jobs import JobAdmin
from fastq.errors import JobFailed, NoResult, ResultTimeout, UnknownQueue
from fastq.producer.batches import current_batch, outside_batches
from fastq.producer.enqueue import Producer
from fastq.producer.routing import Part, pick
from fastq.producer.testbatches import TestBatchBook
from fastq.producer.transport import registered
from fastq.protocol.contracts import EnqueueReply
from fastq.protocol.introspect import JobInfo
from fastq.validate import check_job_id

if TYPE_CHECKING:
    from fastq.job import JobDef
    from fastq.options import EnqueueOptions
    from fastq.producer.durable import Confirmation
    from fastq.producer.unique import UniquePlan

# a run's outcome, as fastq.hooks says it (JobEvent.outcome)
DONE = "done"


@dataclass(frozen=True)
class QueuedJob:
    """One job enqueued in test mode, as a worker would read it (``envelope``: the
    bytes Redis would keep)."""

    id: str
    name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = 0
    due_at: Optional[float] = None  # Unix s; None: ready at once
    tags: tuple[str, ...] = ()
    batch: Optional[str] = None  # the id of the batch it joined
    group: Optional[str] = None  # its group (an enqueue's group=, or the job's template)
    envelope: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class JobRun:
    """One run of a job in a test mode: its ``attempt`` (1 for the first) and its
    ``outcome`` as the app's hooks see it (``"done"``, ``"retried"``, ``"dead"`` or
    ``"broken"``); what the function returned, or the exception it raised, and
    the error a worker records of it (``app.get_job()``'s ``last_error``)."""

    id: str
    name: str
    queue: str
    attempt: int
    outcome: str
    returned: Any = None
    error: Optional[BaseException] = None
    reason: Optional[str] = None  # the error a worker records, or why it is broken


class JobRunner(Protocol):
    """What runs the jobs of a test mode (:class:`fastq.testmode.TestWorker`)."""

    def run(self, job: QueuedJob, jobs: QueuedJobs) -> JobRun:
        """Run ``job`` to its end (its retries at once, their backoff not slept),
        recording each run in ``jobs``; returns the last."""
        ...


@dataclass
class QueuedJobs:
    """What a test enqueued, in order (``list(...)``, ``len``, indexing); ``run()``
    runs them here and now, as a worker would.

    After runs: ``runs`` holds each run in order (:class:`JobRun`: a job retried
    twice has three), ``results`` what each job that ended done returned (by
    id), ``kept`` the results a worker keeps for ``app.result()`` (jobs with
    ``result_ttl_s``, by id, as JSON), ``progress`` each job's progress reports
    (``(fraction, meta)``, in order, by id).
    """

    registry: Mapping[str, Any]
    jobs: list[QueuedJob] = field(default_factory=list)
    book: Optional[TestBatchBook] = field(default=None, repr=False)  # counts batches' jobs
    worker: Optional[JobRunner] = field(default=None, repr=False)
    runs: list[JobRun] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, list[tuple[float, Any]]] = field(default_factory=dict)
    running: dict[str, QueuedJob] = field(default_factory=dict, repr=False)

    def __iter__(self) -> Iterator[QueuedJob]:
        return iter(list(self.jobs))

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, i: int) -> QueuedJob:
        return self.jobs[i]

    def names(self) -> list[str]:
        return [job.name for job in self.jobs]

    def of(self, name: str) -> list[QueuedJob]:
        """The jobs of one name."""
        return [job for job in self.jobs if job.name == name]

    def run(self) -> list[Any]:
        """Run every job kept, first in first out, and those they enqueue in turn,
        until none is left; returns what each returned. A job runs to its end
        before the next starts: one that fails is retried at once by its policy
        (its backoff not slept). The exception of a job that failed for good
        (dead, or broken) propagates (the jobs after it stay kept). A job of a
        batch counts in it as done, or as dead; the callbacks of a batch that
        this ends are kept, and run in turn.

        Raises:
            LookupError: a job's name is not registered in the app.
        """
        results = []
        while self.jobs:
            job = self.jobs.pop(0)
            results.append(self.run_one(job))
        return results

    def run_one(self, job: QueuedJob) -> Any:
        """Run one job (kept or not) to its end, outside any batch (as a worker runs
        it: what it enqueues joins no batch), and count it in its batch; returns
        what its last run returned, or raises what it raised if it failed for good."""
        if self.worker is None:
            raise RuntimeError("these jobs are not in a test mode: no worker runs them")
        self.running[job.id] = job
        try:
            with outside_batches():
                last = self.worker.run(job, self)
        except Exception:  # not the job's (its own are settled): its name is unknown
            if job.batch is not None and self.book is not None:
                self.book.ended(job.batch, ok=False)
            raise
        finally:
            self.running.pop(job.id, None)
        if job.batch is not None and self.book is not None:
            self.book.ended(job.batch, ok=last.outcome == DONE)
        if last.outcome != DONE and last.error is not None:
            raise last.error
        return last.returned

    def last_run(self, job_id: str) -> Optional[JobRun]:
        """The latest run of job ``job_id`` (None: it has not run)."""
        return next((run for run in reversed(self.runs) if run.id == job_id), None)

    def drop(self, batch_id: str) -> int:
        """Take the jobs of batch ``batch_id`` out of the list (a cancel); how many."""
        kept = [job for job in self.jobs if job.batch != batch_id]
        dropped = len(self.jobs) - len(kept)
        self.jobs[:] = kept
        return dropped


class MemoryTransport:
    """The producer's transport in a test mode: each job sent is kept in ``jobs``
    (``eager=False``) or run at once (by ``jobs.run_one``).

    Args:
        registry: the app's jobs by name (the queues it knows).
        declared: the queues declared new on purpose (``app.declare_queue``).
        jobs: where jobs are kept, and what runs them.
        eager: run each job as it is sent.
    """

    in_memory = True

    def __init__(
        self, registry: Mapping[str, JobDef[Any]], declared: set[str], jobs: QueuedJobs, eager: bool
    ) -> None:
        self.registry = registry
        self.declared = declared
        self.jobs = jobs
        self.eager = eager

    def declare(self, queues: Sequence[str], shards: Optional[int]) -> None:
        self.declared.update(queues)  # nothing to write

    def forget_queues(self) -> None:
        pass

    def open(self, queue: str) -> int:
        """One shard (a sharded queue's jobs are kept as one queue's)."""
        if self.registry and not registered(queue, self.registry, self.declared):
            known = {"default", *self.declared, *(j.queue for j in self.registry.values())}
            raise UnknownQueue(queue, sorted(known))
        return 1

    def send(
        self,
        parts: list[Part],
        priority: int,
        options: EnqueueOptions,
        ids: Sequence[str],
        envs: Sequence[bytes],
        unique: Optional[UniquePlan] = None,
        unique_keys: Sequence[str] = (),
    ) -> tuple[list[Any], Optional[Confirmation]]:
        due_at = _due_s(options.due)
        batch, book = current_batch(), self.jobs.book
        batch_id = book.joining(batch) if batch is not None and book is not None else None
        replies: list[Any] = []
        for queue, at in parts:
            for job_id, env in zip(pick(ids, at), pick(envs, at)):
                name, args, kwargs = decode_envelope(env)
                job = QueuedJob(
                    job_id,
                    name,
                    queue,
                    args,
                    kwargs,
                    priority,
                    due_at,
                    tuple(options.tags or ()),
                    batch_id,
                    envelope_group(env),
                    env,
                )
                if batch_id is not None and book is not None:
                    book.joined(batch_id, queue, 1)
                if self.eager:
                    self.jobs.run_one(job)
                else:
                    self.jobs.jobs.append(job)
            replies.append(EnqueueReply(added=len(at), holders={}))
        return replies, None


class TestJobAdmin(JobAdmin):
    """An app's reads of its jobs in a test mode, answered from the jobs kept and
    run there: ``app.get_job()`` (state, attempts, last error, the latest progress
    of a job running, a kept result) and ``app.result()``. The other job methods
    need Redis."""

    __test__ = False  # not a pytest test class

    def __init__(self, real: JobAdmin, jobs: QueuedJobs) -> None:
        super().__init__(real.store, real.admin)  # the store for its namespace: never called
        self.jobs = jobs

    def get_job(self, job_id: str, queue: Optional[str] = None) -> Optional[JobInfo]:
        """As :meth:`JobAdmin.get_job`, in memory: ``queued`` (``scheduled`` if due
        later), ``active`` while it runs (its latest ``progress``), then ``done``,
        ``dead`` or ``broken``."""
        check_job_id(job_id)
        jobs = self.jobs
        kept = next((job for job in jobs.jobs if job.id == job_id), None)
        running = jobs.running.get(job_id)
        job = kept or running
        last = jobs.last_run(job_id)
        where = job.queue if job is not None else last.queue if last is not None else None
        if queue is not None and where is not None and where != queue:
            return None
        if job is not None:
            due = job.due_at is not None and job.due_at > time.time()
            state = "active" if running is not None else ("scheduled" if due else "queued")
            reports = jobs.progress.get(job_id) if running is not None else None
            return JobInfo(
                id=job_id,
                queue=job.queue,
                state=state,
                name=job.name,
                args=job.args,
                kwargs=job.kwargs,
                attempts=last.attempt if last is not None else 0,
                due_at=job.due_at,
                last_error=last.reason if last is not None else None,
                progress=reports[-1][0] if reports else None,
                progress_meta=reports[-1][1] if reports else None,
                tags=list(job.tags),
            )
        if last is None:
            return None
        return JobInfo(
            id=job_id,
            queue=last.queue,
            state=last.outcome,
            name=last.name,
            attempts=last.attempt,
            last_error=last.reason if last.outcome == "dead" else None,
            broken_reason=last.reason if last.outcome == "broken" else None,
            result=jobs.kept.get(job_id),
            has_result=job_id in jobs.kept,
        )

    def result(self, job_id: str, timeout_s: float = 30.0, queue: Optional[str] = None) -> Any:
        """As :meth:`JobAdmin.result`, in memory, without waiting: what a job with
        ``result_ttl_s`` returned.

        Raises:
            fastq.JobFailed: the job is dead or broken.
            fastq.NoResult: it ended without a kept result, or is unknown.
            fastq.ResultTimeout: it has not run yet (``jobs.run()`` runs it).
        """
        if job_id in self.jobs.kept:
            return self.jobs.kept[job_id]
        info = self.get_job(job_id, queue)
        if info is None or info.state == "done":
            raise NoResult(
                f"job {job_id} is gone without a result: an unknown id, or a job "
                "without result_ttl_s"
            )
        if info.state in ("dead", "broken"):
            error = info.last_error if info.state == "dead" else info.broken_reason
            raise JobFailed(job_id, info.state, error, None)
        raise ResultTimeout(f"job {job_id} has not run: jobs.run() runs what a stub keeps")


def _due_s(due: Any) -> Optional[float]:
    """An enqueue's due time in Unix s (``EnqueueOptions.due``: a delay in ms, or
    ``@<ms>``); None when it is due at once."""
    if isinstance(due, str):
        return int(due[1:]) / 1000
    return time.time() + due / 1000 if due else None


def decode_envelope(env: bytes) -> tuple[str, list[Any], dict[str, Any]]:
    """``(name, args, kwargs)`` of an envelope, as a worker reads it."""
    decoded = orjson.loads(env)
    fields = decoded[3] if len(decoded) > 3 and isinstance(decoded[3], dict) else {}
    return decoded[0], list(decoded[1]), dict(fields.get("k") or {})


def envelope_group(env: bytes) -> Optional[str]:
    """The group an envelope names ("g" in its object), if any."""
    decoded = orjson.loads(env)
    fields = decoded[3] if len(decoded) > 3 and isinstance(decoded[3], dict) else {}
    group = fields.get("g")
    return group if isinstance(group, str) else None


@contextmanager
def test_mode(app: Any, eager: bool, worker: Callable[[], JobRunner]) -> Iterator[QueuedJobs]:
    """Give ``app`` a producer over a :class:`MemoryTransport`, a
    :class:`TestBatchBook` and a :class:`TestJobAdmin`, for the ``with`` block;
    ``worker()`` makes what runs the jobs."""
    real, real_book, real_admin = app.producer, app.batch_book, app.job_admin
    jobs = QueuedJobs(app.registry, worker=worker())
    transport = MemoryTransport(app.registry, set(real.transport.declared), jobs, eager)
    producer = Producer(real.store, real.registry, real.max_payload_bytes, None, transport)
    jobs.book = TestBatchBook(real_book, producer, jobs.drop)
    app.producer, app.batch_book = producer, jobs.book
    app.job_admin = TestJobAdmin(real_admin, jobs)
    try:
        yield jobs
    finally:
        app.producer, app.batch_book, app.job_admin = real, real_book, real_admin
