"""Batches: many jobs as one thing, whose callbacks run once, after the last ends.

``with app.batch(on_complete=report) as batch:`` opens a batch; every enqueue made
inside the block (``enqueue``, ``enqueue_many``, a job's ``.enqueue``) joins it, and
leaving the block closes it. What Redis holds, and why counting is exact, is in
:mod:`fastq.protocol.batches`; this module opens, joins, closes and cancels batches,
and *settles* them: it tells a batch the counts of a queue's share that ended, and
enqueues its callbacks when that ends the batch.

Settling is done by whoever sees a share end: the worker whose ack ended it (at
once), else the reaper (the share is noted in the queue's ``batches_due``); a close,
and the firing of callbacks, are noted in the namespace's ``batches:work`` first, so
that a reaper finishes them if their caller dies half-way. Every step can be done
twice: counts are kept as the greater told, and callbacks have ids of the batch's
own (``<batch>.complete``, ``<batch>.success``), so that enqueueing one twice adds it
once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, Union

import orjson
import redis

from fastq.errors import BatchClosed
from fastq.options import EnqueueOptions
from fastq.producer.ids import IdGenerator
from fastq.protocol import batches
from fastq.protocol.batches import BatchStatus, Share, read_status
from fastq.protocol.cancel import cancel_ids
from fastq.protocol.contracts import (
    BATCH_CLOSE,
    BATCH_JOIN,
    BATCH_OPEN,
    BATCH_SEAL,
    BATCH_SETTLE,
    CloseReply,
    SettleReply,
)
from fastq.protocol.keys import BatchKeys
from fastq.protocol.store import Store
from fastq.validate import MAX_JOB_ID_BYTES, check_job_id

if TYPE_CHECKING:
    from fastq.job import JobDef

log = logging.getLogger("fastq.batches")

# An open batch (never closed: its producer died) is deleted this long after it was
# last opened or joined.
OPEN_TTL_MS = 7 * 24 * 3600 * 1000
# An ended batch is kept this long, its status readable.
KEEP_MS = 7 * 24 * 3600 * 1000
# A batch's callbacks are jobs of ids '<batch>.complete' and '<batch>.success'.
MAX_CALLBACK_BATCH_ID = MAX_JOB_ID_BYTES - len(".complete")
# Its callbacks and meta, as JSON, at most: every callback job carries them.
MAX_CALLBACKS_BYTES = 64 * 1024
# A close or a firing not finished this long after it began is finished by a reaper.
WORK_AFTER_MS = 15_000

Callback = Union["JobDef[Any]", str]

_current: ContextVar[Optional[Batch]] = ContextVar("fastq_batch", default=None)


def check_callbacks(batch_id: Optional[str], callbacks: bytes) -> None:
    """A batch's callbacks (with its ``meta``, as JSON; empty: none) fit its id and
    their bound.

    Raises:
        ValueError: the id leaves no room for the callbacks' ids (``<id>.complete``
            is a job id, at most ``MAX_JOB_ID_BYTES``), or they are over
            ``MAX_CALLBACKS_BYTES``.
    """
    if not callbacks:
        return
    if batch_id is not None and len(batch_id) > MAX_CALLBACK_BATCH_ID:
        raise ValueError(
            f"a batch with callbacks has an id of at most {MAX_CALLBACK_BATCH_ID} "
            f"characters, not {len(batch_id)}: its callbacks' ids add '.complete' or "
            f"'.success' and a job id is at most {MAX_JOB_ID_BYTES}"
        )
    if len(callbacks) > MAX_CALLBACKS_BYTES:
        raise ValueError(
            f"meta is too large: the batch's callbacks and meta are {len(callbacks):,} "
            f"bytes as JSON, over {MAX_CALLBACKS_BYTES:,} (every callback carries them): "
            "pass a reference to the data"
        )


def current_batch() -> Optional[Batch]:
    """The batch the enqueue calls of this thread (or task) join, if any."""
    return _current.get()


@contextmanager
def outside_batches() -> Iterator[None]:
    """Enqueue calls made here join no batch (a callback is no job of its batch)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


class Batch:
    """An open batch (``app.batch()``): the enqueue calls made inside its ``with``
    block join it; leaving the block closes it (``close=False``: left open, for
    other processes to add to; close it with ``app.close_batch(id)``). A block
    that raises leaves it open too: open it again with ``app.batch(id=...)`` to
    finish adding, then close it."""

    def __init__(self, book: BatchBook, batch_id: str, close: bool) -> None:
        self.book = book
        self.id = batch_id
        self.close_on_exit = close
        self._joined: set[str] = set()  # the queues (shards) this process joined
        self._token: Any = None

    def __repr__(self) -> str:
        return f"<Batch {self.id}>"

    def __enter__(self) -> Batch:
        self._token = _current.set(self)
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _current.reset(self._token)
        if exc_type is None and self.close_on_exit:
            self.close()

    def join(self, client: redis.Redis, queues: list[str]) -> None:
        """Join the batch on each of ``queues`` (physical) not joined yet, before the
        first job of the batch is enqueued there.

        Raises:
            fastq.BatchClosed: the batch is closed, cancelled, ended or gone.
        """
        keys = [BatchKeys(self.book.store.namespace, self.id).batch]
        for queue in queues:
            if queue not in self._joined:
                # the batch first: a close that comes after it seals this queue's share
                state = BATCH_JOIN.call(client, keys, BATCH_JOIN.argv(f"q:{queue}", OPEN_TTL_MS))
                if state != "open":
                    raise BatchClosed(self.id, state)
                seal_keys = BATCH_SEAL.keys_for(self.book.store.keys(queue))
                BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(self.id, "open"))
                self._joined.add(queue)

    def close(self) -> None:
        """Close it: no job joins it from now, and once every job in it has ended its
        callbacks are enqueued (at once, if they all have)."""
        self.book.close_batch(self.id)

    def cancel(self) -> int:
        """Cancel it (see ``App.cancel_batch``); returns the jobs cancelled."""
        return self.book.cancel_batch(self.id)

    def status(self) -> Optional[BatchStatus]:
        return self.book.batch_status(self.id)


class Submits(Protocol):
    """What firing callbacks needs of the app's producer (fastq.producer.enqueue)."""

    registry: Mapping[str, Any]

    def submit(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]],
        options: EnqueueOptions,
    ) -> str: ...


class BatchBook:
    """An app's batches: opened, joined, closed, cancelled, read and settled here
    (``fastq.App`` delegates its batch methods to it)."""

    def __init__(self, store: Store, producer: Submits) -> None:
        self.store = store
        self.producer = producer
        self._ids = IdGenerator()
        self._trim_at = 0  # ms: when resume() trims the index next

    def _keys(self, batch_id: str) -> BatchKeys:
        return BatchKeys(self.store.namespace, batch_id)

    def _callback(self, fn: Optional[Callback], what: str) -> Optional[dict[str, Any]]:
        if fn is None:
            return None
        name = fn if isinstance(fn, str) else getattr(fn, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{what} must be a job (a JobDef, or its name), not {fn!r}")
        jobdef = self.producer.registry.get(name)
        if jobdef is not None:  # it will be called with the batch's status: say now if it can't
            try:
                jobdef.arg_checker.check(({},), None)
            except TypeError as exc:
                raise TypeError(
                    f"{what} {name!r} must take one argument, the batch: {exc}"
                ) from None
        queue = getattr(fn, "queue", None) or (jobdef.queue if jobdef else "default")
        priority = getattr(fn, "priority", None) or (jobdef.priority if jobdef else 0)
        return {"name": name, "queue": queue, "p": priority}

    def batch(
        self,
        on_complete: Optional[Callback] = None,
        on_success: Optional[Callback] = None,
        *,
        description: str = "",
        meta: Any = None,
        id: Optional[str] = None,  # noqa: A002 - what users of a batch call it
        close: bool = True,
    ) -> Batch:
        """Open a batch (or, with the ``id`` of one open already, join it): use it as
        ``with app.batch(...) as batch:``; the enqueue calls inside join it, and
        leaving the block closes it (``close=False``: not).

        ``on_complete`` runs once every job in it has ended, whatever the outcome;
        ``on_success`` once every job has succeeded (never, if one died or was
        cancelled). Each is a job (a ``JobDef`` or a job name), enqueued once, with
        one argument: the batch's status as a dict (``id``, ``description``,
        ``total``, ``done``, ``failed``, ``dead``, ``cancelled``, ``cancelled_at``,
        ``started_at``, ``ended_at``, ``meta``: ``meta`` given here, any JSON).
        A batch opened inside another one's block belongs to it: the outer one
        ends only once the inner one has, and counts its jobs too.

        Raises:
            TypeError, ValueError: a bad callback, id or ``meta``.
            fastq.BatchClosed: ``id`` names a batch that is not open, or the
                batch this one would belong to is not.
        """
        if id is not None:
            check_job_id(id)
            if "{" in id or "}" in id:
                raise ValueError(f"a batch id holds no '{{' nor '}}': {id!r}")
        batch_id = id if id is not None else self._ids.next_ids(1)[0]
        callbacks = {
            kind: spec
            for kind, spec in (
                ("complete", self._callback(on_complete, "on_complete")),
                ("success", self._callback(on_success, "on_success")),
            )
            if spec is not None
        }
        cb = orjson.dumps({**callbacks, "meta": meta}) if callbacks else b""
        check_callbacks(id, cb)
        parent = current_batch()
        client = self.store.redis
        if (
            parent is not None
            and id is not None
            and batches.batch_exists(client, self._keys(batch_id))
        ):
            parent = None  # joining a batch that exists: it keeps the parent it was opened under
        if parent is not None:
            state = BATCH_JOIN.call(
                client,
                [self._keys(parent.id).batch],
                BATCH_JOIN.argv(f"k:{batch_id}", OPEN_TTL_MS),
            )
            if state != "open":
                raise BatchClosed(parent.id, state)
        created, state = BATCH_OPEN.call(
            client,
            [self._keys(batch_id).batch],
            BATCH_OPEN.argv(OPEN_TTL_MS, description, cb, parent.id if parent else ""),
        )
        if state != "open":
            raise BatchClosed(batch_id, state)
        if created:
            batches.add_to_index(client, self._keys(batch_id), int(time.time() * 1000))
        return Batch(self, batch_id, close)

    def batch_status(self, batch_id: str) -> Optional[BatchStatus]:
        """The batch's counts and state (None: no such batch, or it expired: a batch
        is kept 7 days after it ended, or after it was last opened if never closed)."""
        return read_status(self.store.redis, self.store.namespace, batch_id)

    def list_batches(self, limit: int = 100) -> list[BatchStatus]:
        """The latest batches opened, newest first (those expired are left out)."""
        client = self.store.redis
        out: list[BatchStatus] = []
        for batch_id in batches.newest_in_index(client, self.store.namespace, max(limit, 1) * 2):
            status = read_status(client, self.store.namespace, batch_id)
            if status is None:
                batches.drop_from_index(client, self._keys(batch_id))  # expired
            elif len(out) < limit:
                out.append(status)
        return out

    def close_batch(self, batch_id: str) -> None:
        """Close batch ``batch_id`` (what leaving its ``with`` block does).

        Raises:
            fastq.BatchClosed: there is no such batch.
        """
        self._close(self.store.redis, batch_id, cancel=False)

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel batch ``batch_id`` and the batches it holds: no job joins it from now,
        its waiting jobs (queued, scheduled, awaiting a retry) never run, and those
        running finish (counted as they end). Its ``on_complete`` runs once they
        have, and sees the cancelled count; ``on_success`` never does. Returns the
        jobs cancelled.

        Raises:
            fastq.BatchClosed: there is no such batch.
        """
        return self._close(self.store.redis, batch_id, cancel=True)

    # -- closing and settling -------------------------------------------------------

    def _later(self, client: redis.Redis, batch_id: str) -> None:
        """Note ``batch_id`` for a reaper, in case this process dies before it is done."""
        batches.note_work(client, self._keys(batch_id), int(time.time() * 1000) + WORK_AFTER_MS)

    def _close(self, client: redis.Redis, batch_id: str, cancel: bool) -> int:
        self._later(client, batch_id)
        keys = self._keys(batch_id)
        reply = BATCH_CLOSE.call(client, [keys.batch], BATCH_CLOSE.argv(cancel))
        if not reply.state:
            batches.drop_work(client, keys)
            raise BatchClosed(batch_id, "")
        cancelled = self._seal(client, batch_id, reply)
        batches.drop_work(client, keys)
        return cancelled

    def _seal(self, client: redis.Redis, batch_id: str, reply: CloseReply) -> int:
        """Seal every queue's share of a closed batch (cancelling its waiting jobs if
        it is cancelled), and report the shares: what ends a batch whose jobs have
        all ended already."""
        mode = "cancel" if reply.cancelled else "seal"
        reports, cancelled = [], 0
        for member in reply.members:
            kind, name = member[:2], member[2:]
            if kind == "k:":
                if reply.cancelled:
                    with contextlib.suppress(BatchClosed):  # it expired, or never opened
                        cancelled += self._close(client, name, cancel=True)
                continue
            seal_keys = BATCH_SEAL.keys_for(self.store.keys(name))
            share = BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(batch_id, mode))
            if reply.cancelled:
                cancelled += self._cancel_waiting(client, name, batch_id)
                share = BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(batch_id, "read"))
            if share is not None:
                reports.append((member, share))
        if reply.state != "ended":
            self._settle(client, batch_id, reports)
        return cancelled

    def _cancel_waiting(self, client: redis.Redis, queue: str, batch_id: str) -> int:
        """Cancel the jobs of ``batch_id`` waiting on ``queue`` (those running finish)."""
        qkeys = self.store.keys(queue)
        stopped = 0
        for job_ids in batches.batched_ids(client, qkeys, batch_id):
            stopped += cancel_ids(client, qkeys, job_ids).stopped
        return stopped

    def settle_shares(self, client: redis.Redis, queue: str, batch_ids: list[str]) -> None:
        """Tell each of ``batch_ids`` the counts of its share of ``queue``, which has
        ended (an ack said so, or the queue's ``batches_due``): the worker's and the
        reaper's call. May raise a Redis error: the share stays due, for later."""
        qkeys = self.store.keys(queue)
        seal_keys = BATCH_SEAL.keys_for(qkeys)
        for batch_id in batch_ids:
            share = BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(batch_id, "read"))
            if share is not None:
                reply = self._settle(client, batch_id, [(f"q:{queue}", share)])
                if reply.state not in ("", "fired"):
                    batches.drop_due_share(client, qkeys, batch_id)
                    continue
            # no such batch (it expired), or it is over: its share goes
            BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(batch_id, "drop"))

    def _settle(
        self, client: redis.Redis, batch_id: str, reports: list[tuple[str, str]]
    ) -> SettleReply:
        keys = [self._keys(batch_id).batch]
        reply = BATCH_SETTLE.call(client, keys, BATCH_SETTLE.argv(KEEP_MS, False, reports))
        if reply.state == "fire":
            self._fire(client, batch_id, reply)
        return reply

    def _fire(self, client: redis.Redis, batch_id: str, reply: SettleReply) -> None:
        """Enqueue the callbacks of a batch that ended, tell its parent, say so."""
        self._later(client, batch_id)
        total, done, dead, cancelled, failed = reply.counts
        spec = orjson.loads(reply.callbacks) if reply.callbacks else {}
        status = {
            "id": batch_id,
            "description": reply.description,
            "total": total,
            "done": done,
            "failed": failed,
            "dead": dead,
            "cancelled": cancelled,
            "cancelled_at": None,
            "started_at": reply.opened_ms / 1000,
            "ended_at": reply.ended_ms / 1000,
            "meta": spec.get("meta"),
        }
        if reply.cancelled:
            cancelled_ms = batches.cancelled_ms(client, self._keys(batch_id))
            status["cancelled_at"] = (
                reply.ended_ms if cancelled_ms is None else cancelled_ms
            ) / 1000
        succeeded = done == total and not reply.cancelled
        with outside_batches():
            for kind in ("complete", "success"):
                cb = spec.get(kind)
                if cb is None or (kind == "success" and not succeeded):
                    continue
                options = {
                    "queue": cb["queue"],
                    "priority": cb["p"],
                    "job_id": f"{batch_id}.{kind}",
                }
                self.producer.submit(
                    cb["name"], [status], None, EnqueueOptions.of(options, "enqueue")
                )
        if reply.parent:
            counts = Share(total, done, dead, cancelled, failed).counts_text()
            self._settle(client, reply.parent, [(f"k:{batch_id}", counts)])
        keys = self._keys(batch_id)
        BATCH_SETTLE.call(client, [keys.batch], BATCH_SETTLE.argv(KEEP_MS, True))
        for queue in batches.queues_joined(client, keys):
            seal_keys = BATCH_SEAL.keys_for(self.store.keys(queue))
            BATCH_SEAL.call(client, seal_keys, BATCH_SEAL.argv(batch_id, "drop"))
        batches.drop_work(client, keys)
        log.info(
            "batch %s ended: %d jobs, %d done, %d dead, %d cancelled%s",
            batch_id,
            total,
            done,
            dead,
            cancelled,
            "; callbacks enqueued" if spec else "",
        )

    def resume(self, client: redis.Redis, queues: list[str]) -> None:
        """A reaper's turn: settle the shares the queues note as ended, and finish the
        closes and firings whose callers did not (they died, or Redis failed them)."""
        queue_keys = [self.store.keys(queue) for queue in queues]
        due = batches.due_shares(client, queue_keys, cluster=self.store.cluster_flag)
        for queue, batch_ids in zip(queues, due):
            if batch_ids:
                self.settle_shares(client, queue, batch_ids)
        namespace = self.store.namespace
        now = int(time.time() * 1000)
        if now >= self._trim_at:  # the index forgets batches that have expired
            self._trim_at = now + 60_000
            batches.trim_index(client, namespace, now - OPEN_TTL_MS - KEEP_MS)
        for batch_id in batches.work_due(client, namespace, now):
            keys = self._keys(batch_id)
            state = batches.batch_state(client, keys)
            if state == b"closed":
                self._close(client, batch_id, cancel=False)  # a cancel's flag stays set
            elif state == b"ended":
                self._settle(client, batch_id, [])
            batches.drop_work(client, keys)
