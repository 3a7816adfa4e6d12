"""The running job's context (``fastq.current_job()``) and its progress reports.

The context is per task, not per process: a ``ContextVar`` that a runner sets,
so that an asyncio runner (many jobs in flight per child) can set one per task.
The sync runner sets it once per batch to a cursor it moves from job to job (an
attribute store per job, not a ``ContextVar.set``): a job that never asks for
its context costs nothing more.

Progress is batched: ``set_progress`` only keeps the latest report of each job
in a :class:`ProgressBuffer`; the worker's lease thread sends what is there at
its next beat (every ``PROGRESS_FLUSH_S``), in one pipeline, however many times
the jobs reported. A job's report is deleted by the round trip that acknowledges
it (so a retry starts without one).
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import orjson

from fastq.protocol.keys import logical_queue
from fastq.validate import MAX_PROGRESS_META_BYTES, is_finite

if TYPE_CHECKING:
    from fastq.job import Runnable

# How often the lease thread sends the progress reported since its last beat.
PROGRESS_FLUSH_S = 0.5


class ProgressBuffer:
    """The latest progress report of each running job, until the lease thread
    sends it.

    Written by the runner's thread, taken by the lease thread. A send holds
    ``sending`` from taking the reports until Redis answered, and :meth:`ended`
    takes it too: once a job is said ended, no report of it is in flight or left
    to send, so the delete that the worker's next round trip carries is the last
    word on it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sending = threading.Lock()
        self._latest: dict[str, dict[bytes, bytes]] = {}
        # jobs that reported and have not ended (read by the runner once per batch)
        self.reported: set[tuple[str, bytes]] = set()

    def report(self, queue: str, job_id: bytes, value: bytes) -> None:
        with self._lock:
            self._latest.setdefault(queue, {})[job_id] = value
            self.reported.add((queue, job_id))

    def ended(self, queue: str, job_ids: list[bytes]) -> list[bytes]:
        """These jobs of ``queue`` ended: their unsent reports are dropped.

        Returns:
            Those that reported, whose report (sent or not) the caller deletes.
        """
        with self.sending, self._lock:
            latest = self._latest.get(queue, {})
            gone = []
            for job_id in job_ids:
                if (queue, job_id) in self.reported:
                    self.reported.discard((queue, job_id))
                    latest.pop(job_id, None)
                    gone.append(job_id)
            return gone

    def take(self) -> dict[str, dict[bytes, bytes]]:
        """The reports to send, by queue; emptied. Call it holding ``sending``."""
        with self._lock:
            latest, self._latest = self._latest, {}
        return {q: v for q, v in latest.items() if v}

    def give_back(self, latest: dict[str, dict[bytes, bytes]]) -> None:
        """Take back what a failed send carried (of jobs still running); newer
        reports win."""
        with self._lock:
            for queue, reports in latest.items():
                mine = self._latest.setdefault(queue, {})
                for job_id, value in reports.items():
                    if (queue, job_id) in self.reported:
                        mine.setdefault(job_id, value)

    def __bool__(self) -> bool:
        return bool(self._latest)


class BatchCursor:
    """Which job of a batch runs now: what ``current_job()`` reads."""

    __slots__ = ("queue", "runnable", "index", "progress")

    def __init__(
        self, queue: str, runnable: list[Runnable], progress: Optional[ProgressBuffer]
    ) -> None:
        self.queue = queue
        self.runnable = runnable
        self.index = -1
        self.progress = progress


_current: ContextVar[Optional[BatchCursor]] = ContextVar("fastq_current_job", default=None)


@dataclass(frozen=True)
class JobContext:
    """The job running in this task: ``id``, ``queue``, ``name`` and ``attempt``
    (1 for the first run)."""

    id: str
    queue: str
    name: str
    attempt: int
    _job_id: bytes
    _cursor: BatchCursor
    _index: int

    def set_progress(self, fraction: float, meta: Any = None) -> None:
        """Report how far the job is, shown by ``app.get_job()`` as ``progress``
        and ``progress_meta`` until the job ends. Reports are batched: the worker
        sends the latest one within ``PROGRESS_FLUSH_S``, however often it is called.

        Args:
            fraction: a finite number in [0, 1].
            meta: anything JSON can encode, up to ``MAX_PROGRESS_META_BYTES``
                encoded (e.g. ``{"sent": 120, "of": 3000}``).

        Raises:
            TypeError: ``fraction`` is not a number, or ``meta`` is not JSON-serializable.
            ValueError: ``fraction`` is not finite or outside [0, 1], or ``meta``
                is too large.
            RuntimeError: the job has ended (a context kept past its run).
        """
        value = encode_progress(fraction, meta)
        cursor = self._cursor
        if cursor.index != self._index:
            raise RuntimeError(f"set_progress: job {self.id} has ended; its progress is gone")
        if cursor.progress is not None:
            cursor.progress.report(cursor.queue, self._job_id, value)  # its shard's


def encode_progress(fraction: object, meta: Any) -> bytes:
    """The stored form of a progress report: ``{"fraction": f, "meta": m}``.

    Raises:
        TypeError, ValueError: as :meth:`JobContext.set_progress`.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"set_progress: fraction must be a number in [0, 1], not {fraction!r}")
    if not is_finite(fraction) or not 0 <= fraction <= 1:
        raise ValueError(
            f"set_progress: fraction must be a finite number in [0, 1], not {fraction!r}"
        )
    try:
        meta_bytes = orjson.dumps(meta)
    except TypeError as exc:
        raise TypeError(f"set_progress: meta must be JSON-serializable: {exc}") from None
    if len(meta_bytes) > MAX_PROGRESS_META_BYTES:
        raise ValueError(
            f"set_progress: meta is {len(meta_bytes)} bytes encoded, more than "
            f"{MAX_PROGRESS_META_BYTES}"
        )
    return b'{"fraction":%s,"meta":%s}' % (orjson.dumps(float(fraction)), meta_bytes)


def current_job() -> JobContext:
    """The job running in this task (thread or asyncio task) of a worker.

    Returns:
        Its :class:`JobContext`: ``id``, ``queue``, ``name``, ``attempt`` and
        ``set_progress(fraction, meta=None)``.

    Raises:
        RuntimeError: no fastq job is running here (e.g. called at import, from a
            producer, or from a thread the job started, which does not inherit it).
    """
    cursor = _current.get()
    if cursor is None or cursor.index < 0:
        raise RuntimeError(
            "fastq.current_job() called outside a running job: it works only inside a "
            "job function run by a fastq worker"
        )
    job_id, target, _args, _kwargs, attempt, _env = cursor.runnable[cursor.index]
    return JobContext(
        job_id.decode(),
        logical_queue(cursor.queue),
        target.name,
        attempt,
        job_id,
        cursor,
        cursor.index,
    )


def enter_batch(cursor: BatchCursor) -> Any:
    """Make ``cursor`` this task's job context; returns the token for :func:`leave`."""
    return _current.set(cursor)


def leave(token: Any) -> None:
    _current.reset(token)
