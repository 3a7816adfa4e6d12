"""A test mode for users' own tests, without Redis: ``app.stub()`` keeps what the
code under test enqueues, for assertions (Dramatiq's ``StubBroker``, Sidekiq's
``Testing.fake!``); ``app.eager()`` runs each job at once, in-process (Celery's
``task_always_eager``, RQ's ``is_async=False``).

Either way an enqueue goes through the real producer, less Redis: the same argument
checks against the job's signature, the same encoding (a value JSON cannot carry is
refused with the same ``TypeError``), the same size limit and option checks, and the
same "unknown queue" refusal. A job then runs from its decoded envelope, as a worker
would run it: what the function receives is what came through JSON.

Batches are kept in memory (:mod:`fastq.producer.testbatches`): a job enqueued in
one says so (``QueuedJob.batch``) and is counted as it runs; a batch ends, and its
callbacks are enqueued, once its last job has run.

Not here: retries, delays (an eager job runs at once; a stub keeps ``due_at``),
rate limits, uniqueness locks and at-most-once delivery, which live in Redis' scripts;
test those against a real ``redis-server`` (``fastq.testing.RedisServer``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import orjson

from fastq.errors import Fail, Retry, UnknownQueue
from fastq.producer.batches import current_batch, outside_batches
from fastq.producer.enqueue import Producer
from fastq.producer.routing import Part, pick
from fastq.producer.testbatches import TestBatchBook
from fastq.protocol.contracts import EnqueueReply

if TYPE_CHECKING:
    from redis import Redis

    from fastq.options import EnqueueOptions
    from fastq.producer.durable import Confirmation
    from fastq.producer.unique import UniquePlan


@dataclass(frozen=True)
class QueuedJob:
    """One job enqueued in test mode, as a worker would read it."""

    id: str
    name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = 0
    due_at: Optional[float] = None  # Unix s; None: ready at once
    tags: tuple[str, ...] = ()
    batch: Optional[str] = None  # the id of the batch it joined


@dataclass
class QueuedJobs:
    """What a test enqueued, in order (``list(...)``, ``len``, indexing); ``run()``
    runs them here and now."""

    registry: Mapping[str, Any]
    jobs: list[QueuedJob] = field(default_factory=list)
    book: Optional[TestBatchBook] = field(default=None, repr=False)  # counts batches' jobs

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
        until none is left; returns their results. An exception a job raises
        propagates (the jobs after it stay kept). A job of a batch counts in it as
        done, or as dead if it raised (or returned ``Retry`` or ``Fail``: no retries
        here); the callbacks of a batch that this ends are kept, and run in turn.

        Raises:
            LookupError: a job's name is not registered in the app.
        """
        results = []
        while self.jobs:
            job = self.jobs.pop(0)
            results.append(self.run_one(job))
        return results

    def run_one(self, job: QueuedJob) -> Any:
        """Run one job (kept or not), outside any batch (as a worker runs it: what it
        enqueues joins no batch), and count it in its batch."""
        try:
            with outside_batches():
                result = run_job(self.registry, job)
        except Exception:
            if job.batch is not None and self.book is not None:
                self.book.ended(job.batch, ok=False)
            raise
        if job.batch is not None and self.book is not None:
            self.book.ended(job.batch, ok=not isinstance(result, (Retry, Fail)))
        return result

    def drop(self, batch_id: str) -> int:
        """Take the jobs of batch ``batch_id`` out of the list (a cancel); how many."""
        kept = [job for job in self.jobs if job.batch != batch_id]
        dropped = len(self.jobs) - len(kept)
        self.jobs[:] = kept
        return dropped


def run_job(registry: Mapping[str, Any], job: QueuedJob) -> Any:
    """Call a job's function with what its envelope carries (``async def`` ones in a
    fresh event loop)."""
    jobdef = registry.get(job.name)
    if jobdef is None:
        raise LookupError(
            f"job {job.name!r} is not registered in this app (a worker would break it)"
        )
    result = jobdef.fn(*job.args, **job.kwargs)
    if inspect.iscoroutine(result):
        import asyncio  # only a test with async jobs pays for it

        result = asyncio.run(result)
    return result


class TestProducer(Producer):
    """The app's producer with its Redis calls replaced: each job sent is decoded and
    kept (``eager=False``) or run at once."""

    __test__ = False  # not a pytest test class

    def __init__(self, real: Producer, jobs: QueuedJobs, eager: bool) -> None:
        super().__init__(real.store, real.registry, real.max_payload_bytes, None)
        self._declared_queues = set(real._declared_queues)
        self.jobs = jobs
        self.eager = eager

    def declare_queue(self, *queues: str, shards: Optional[int] = None) -> None:
        for queue in queues:  # the checks, not the write
            Producer.declare_queue(self, queue)
            self._declared_queues.add(queue)

    def _connect(self, queue: str) -> tuple[Redis, int]:
        known = {"default", *self._declared_queues, *(j.queue for j in self.registry.values())}
        if queue not in known and self.registry:
            raise UnknownQueue(queue, sorted(known))
        return None, 1  # type: ignore[return-value]  # no client: _send below needs none

    def _send(
        self,
        client: Redis,
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
                )
                if batch_id is not None and book is not None:
                    book.joined(batch_id, queue, 1)
                if self.eager:
                    self.jobs.run_one(job)
                else:
                    self.jobs.jobs.append(job)
            replies.append(EnqueueReply(added=len(at), holders={}))
        return replies, None


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


@contextmanager
def test_mode(app: Any, eager: bool) -> Iterator[QueuedJobs]:
    """Swap ``app``'s producer for a :class:`TestProducer`, and its batch book for a
    :class:`TestBatchBook`, for the ``with`` block."""
    real, real_book = app.producer, app.batch_book
    jobs = QueuedJobs(app.registry)
    producer = TestProducer(real, jobs, eager)
    jobs.book = TestBatchBook(real_book, producer, jobs.drop)
    app.producer, app.batch_book = producer, jobs.book
    try:
        yield jobs
    finally:
        app.producer, app.batch_book = real, real_book
