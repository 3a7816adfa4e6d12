"""Batches in the test mode (``app.stub()``, ``app.eager()``), kept in memory.

A :class:`TestBatchBook` takes the place of the app's :class:`BatchBook` for the
``with`` block of a test mode: ``app.batch()``, ``batch_status``, ``close_batch``,
``cancel_batch`` and ``list_batches`` answer from this process' memory, with the
states and counts of the real thing (:mod:`fastq.producer.batches`) and no Redis.
The test mode tells it each job that joins a batch, and each one that ends (run
here, its retries at once: done, or dead once it failed for good). A closed batch
whose jobs have all ended ends at once: its callbacks are enqueued through the test
mode's producer, so a stub keeps them for the next ``jobs.run()`` and an eager app
runs them there and then. Batches
inside batches count into their parent as in Redis.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import orjson

from fastq.errors import BatchClosed
from fastq.options import EnqueueOptions
from fastq.producer.batches import (
    Batch,
    BatchBook,
    Callback,
    Submits,
    check_callbacks,
    current_batch,
    outside_batches,
)
from fastq.protocol.batches import BatchStatus, Share
from fastq.validate import check_job_id


@dataclass
class KeptBatch:
    """One batch of a test mode: its own jobs' counts (``own``), its children's
    ids, and the times of its states (Unix s)."""

    id: str
    description: str
    spec: dict[str, Any]  # 'complete'/'success' -> {'name', 'queue', 'p'}
    meta: Any
    parent: Optional[str]
    started_at: float
    state: str = "open"  # open, closed, ended
    own: Share = Share()
    queues: set[str] = field(default_factory=set)
    children: list[str] = field(default_factory=list)
    closed_at: Optional[float] = None
    cancelled_at: Optional[float] = None
    ended_at: Optional[float] = None


class TestBatchBook(BatchBook):
    """An app's batches in a test mode (``fastq.App`` delegates to it there): the
    same arguments, checks, states and counts as :class:`BatchBook`, in memory.

    ``drop(batch_id)`` takes the jobs of a batch that a stub keeps out of its list
    (a cancel) and returns how many it took.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, real: BatchBook, producer: Submits, drop: Callable[[str], int]) -> None:
        super().__init__(real.store, producer)  # the store for its namespace: never called
        self.drop = drop
        self.kept: dict[str, KeptBatch] = {}

    def batch(
        self,
        on_complete: Optional[Callback] = None,
        on_success: Optional[Callback] = None,
        *,
        description: str = "",
        meta: Any = None,
        id: Optional[str] = None,  # noqa: A002 - as BatchBook.batch
        close: bool = True,
    ) -> Batch:
        """As :meth:`BatchBook.batch`, in memory."""
        if id is not None:
            check_job_id(id)
            if "{" in id or "}" in id:
                raise ValueError(f"a batch id holds no '{{' nor '}}': {id!r}")
        spec = {
            kind: cb
            for kind, cb in (
                ("complete", self._callback(on_complete, "on_complete")),
                ("success", self._callback(on_success, "on_success")),
            )
            if cb is not None
        }
        check_callbacks(id, orjson.dumps({**spec, "meta": meta}) if spec else b"")
        parent = current_batch()
        parent_id = self.joining(parent) if parent is not None else None
        batch_id = id if id is not None else self._ids.next_ids(1)[0]
        found = self.kept.get(batch_id)
        if found is not None:
            if found.state != "open":
                raise BatchClosed(batch_id, _state(found))
            return Batch(self, batch_id, close)
        self.kept[batch_id] = KeptBatch(batch_id, description, spec, meta, parent_id, time.time())
        if parent_id is not None:
            self.kept[parent_id].children.append(batch_id)
        return Batch(self, batch_id, close)

    def joining(self, batch: Batch) -> str:
        """The id of ``batch``, which a job (or a batch) is to join.

        Raises:
            fastq.BatchClosed: it is not open.
            RuntimeError: it was opened outside this test mode (in Redis).
        """
        kept = self.kept.get(batch.id)
        if batch.book is not self or kept is None:
            raise RuntimeError(
                f"batch {batch.id!r} was opened outside this test mode: open it "
                "inside the app.stub() / app.eager() block"
            )
        if kept.state != "open":
            raise BatchClosed(batch.id, _state(kept))
        return batch.id

    def joined(self, batch_id: str, queue: str, count: int) -> None:
        """``count`` jobs on ``queue`` joined batch ``batch_id``."""
        kept = self.kept[batch_id]
        kept.queues.add(queue)
        kept.own = kept.own + Share(enqueued=count)

    def ended(self, batch_id: str, ok: bool) -> None:
        """A job of batch ``batch_id`` ran: done (``ok``), or dead (it failed its
        one run: counted failed too); the batch ends if it was its last."""
        kept = self.kept.get(batch_id)
        if kept is None:  # not one of this block's batches: nothing to count
            return
        kept.own = kept.own + (Share(done=1) if ok else Share(dead=1, failed=1))
        self._end(kept)

    def _totals(self, kept: KeptBatch) -> Share:
        total = kept.own
        for child in kept.children:
            total = total + self._totals(self.kept[child])
        return total

    def _end(self, kept: KeptBatch) -> None:
        """End ``kept`` if it is closed and every job and child of it has ended: fire
        its callbacks, then settle its parent (which counts it)."""
        own = kept.own
        if kept.state != "closed" or own.done + own.dead + own.cancelled < own.enqueued:
            return
        if any(self.kept[child].state != "ended" for child in kept.children):
            return
        kept.state, kept.ended_at = "ended", time.time()
        totals = self._totals(kept)
        status = {
            "id": kept.id,
            "description": kept.description,
            "total": totals.enqueued,
            "done": totals.done,
            "failed": totals.failed,
            "dead": totals.dead,
            "cancelled": totals.cancelled,
            "cancelled_at": kept.cancelled_at,
            "started_at": kept.started_at,
            "ended_at": kept.ended_at,
            "meta": kept.meta,
        }
        succeeded = totals.done == totals.enqueued and kept.cancelled_at is None
        with outside_batches():
            for kind in ("complete", "success"):
                cb = kept.spec.get(kind)
                if cb is None or (kind == "success" and not succeeded):
                    continue
                options = {"queue": cb["queue"], "priority": cb["p"], "job_id": f"{kept.id}.{kind}"}
                self.producer.submit(
                    cb["name"], [status], None, EnqueueOptions.of(options, "enqueue")
                )
        if kept.parent is not None:
            self._end(self.kept[kept.parent])

    def _closing(self, batch_id: str, cancel: bool) -> KeptBatch:
        kept = self.kept.get(batch_id)
        if kept is None:
            raise BatchClosed(batch_id, "")
        if kept.state == "open":
            kept.state, kept.closed_at = "closed", time.time()
        if cancel and kept.state == "closed" and kept.cancelled_at is None:
            kept.cancelled_at = time.time()
        return kept

    def close_batch(self, batch_id: str) -> None:
        """As :meth:`BatchBook.close_batch`, in memory: a batch whose jobs have all
        ended ends at once, its callbacks enqueued (run, in an eager app)."""
        self._end(self._closing(batch_id, cancel=False))

    def cancel_batch(self, batch_id: str) -> int:
        """As :meth:`BatchBook.cancel_batch`, in memory: the jobs of the batch (and
        of the batches it holds) that a stub keeps are taken out of its list and
        counted cancelled; returns how many."""
        kept = self._closing(batch_id, cancel=True)
        if kept.state == "ended":
            return 0
        cancelled = 0
        for child in kept.children:
            cancelled += self.cancel_batch(child)
        dropped = self.drop(batch_id)
        kept.own = kept.own + Share(cancelled=dropped)
        self._end(kept)
        return cancelled + dropped

    def batch_status(self, batch_id: str) -> Optional[BatchStatus]:
        """As :meth:`BatchBook.batch_status`, in memory (None: no such batch)."""
        kept = self.kept.get(batch_id)
        if kept is None:
            return None
        totals = self._totals(kept)
        return BatchStatus(
            id=kept.id,
            state=_state(kept),
            description=kept.description,
            total=totals.enqueued,
            pending=totals.enqueued - totals.done - totals.dead - totals.cancelled,
            done=totals.done,
            failed=totals.failed,
            dead=totals.dead,
            cancelled=totals.cancelled,
            started_at=kept.started_at,
            closed_at=kept.closed_at,
            cancelled_at=kept.cancelled_at,
            ended_at=kept.ended_at,
            parent=kept.parent,
            queues=sorted(kept.queues),
            children=sorted(kept.children),
            callbacks={kind: cb["name"] for kind, cb in kept.spec.items()},
        )

    def list_batches(self, limit: int = 100) -> list[BatchStatus]:
        """As :meth:`BatchBook.list_batches`, in memory: newest first."""
        newest = list(reversed(self.kept))[: max(limit, 0)]
        return [status for bid in newest if (status := self.batch_status(bid)) is not None]

    def settle_shares(self, client: Any, queue: str, batch_ids: list[str]) -> None:
        raise RuntimeError("a test mode settles its batches itself: no worker runs in it")

    def resume(self, client: Any, queues: list[str]) -> None:
        raise RuntimeError("a test mode settles its batches itself: no reaper runs in it")


def _state(kept: KeptBatch) -> str:
    """Its state as a status says it: open, closed, cancelled or ended."""
    if kept.state == "closed" and kept.cancelled_at is not None:
        return "cancelled"
    return kept.state
