"""What Redis holds of a batch, and how it is read back.

A batch (``app.batch()``, :mod:`fastq.producer.batches`) lives in two places:

- **its own hash** (``BatchKeys.batch``, a slot of its own): its state, callbacks,
  and the counts each member last told it (``lua/batch_open.lua``);
- **each queue's share** of it (``QueueKeys.batches``), counted by the very scripts
  that end its jobs there (``lua/lib/batches.lua``): enqueued, done, dead,
  cancelled, failed, and whether the batch sealed it.

A share whose jobs have all ended once the batch is closed is noted in the queue's
``batches_due`` (and returned by the ack that ended it); a settler tells the batch
(``batch_settle.lua``), and the call that finds every member ended ends the batch
and hands back its callbacks to enqueue. Nothing counts by sweeping: a sweep only
carries counts that the job-ending scripts kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import orjson
import redis

from fastq.connection.typed import hash_page
from fastq.protocol.keys import BatchKeys, QueueKeys

# A share: 'enq,done,dead,cancelled,failed,flag' (lib/batches.lua)
SEALED, CANCELLED = "c", "x"
# Ids a cancel reads from a queue's batched hash per HSCAN call.
SCAN_COUNT = 1000


@dataclass(frozen=True)
class Share:
    """One queue's share of a batch, or a child batch's final counts."""

    enqueued: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0
    failed: int = 0
    flag: str = ""  # '' open, SEALED, CANCELLED

    @classmethod
    def parse(cls, text: Any) -> Optional[Share]:
        if isinstance(text, bytes):
            text = text.decode()
        if not text:
            return None
        parts = text.split(",")
        e, d, x, c, f = (int(p) for p in parts[:5])
        return cls(e, d, x, c, f, parts[5] if len(parts) > 5 else SEALED)

    @property
    def ended(self) -> bool:
        return self.flag != "" and self.done + self.dead + self.cancelled >= self.enqueued

    def text(self) -> str:
        return f"{self.enqueued},{self.done},{self.dead},{self.cancelled},{self.failed},{self.flag}"

    def counts_text(self) -> str:
        """As a child batch reports itself to its parent: its five counts."""
        return f"{self.enqueued},{self.done},{self.dead},{self.cancelled},{self.failed}"

    def __add__(self, other: Share) -> Share:
        return Share(
            self.enqueued + other.enqueued,
            self.done + other.done,
            self.dead + other.dead,
            self.cancelled + other.cancelled,
            self.failed + other.failed,
        )

    def most(self, other: Optional[Share]) -> Share:
        """The greater of each count (counts only grow: the later of two reports)."""
        if other is None:
            return self
        return Share(
            max(self.enqueued, other.enqueued),
            max(self.done, other.done),
            max(self.dead, other.dead),
            max(self.cancelled, other.cancelled),
            max(self.failed, other.failed),
            self.flag or other.flag,
        )


def _seconds(ms: Any) -> Optional[float]:
    return int(ms) / 1000 if ms else None


@dataclass(frozen=True)
class BatchStatus:
    """A batch as it stands (``app.batch_status(id)``).

    ``total`` jobs joined it (with those of the batches it holds); ``done``,
    ``dead`` and ``cancelled`` ended so, and ``pending`` have not ended yet;
    ``failed`` jobs failed at least one run (each once, whatever its end: a job
    retried and then done counts in ``done`` and in ``failed``). ``state`` is
    ``open`` (jobs may still join), ``closed`` (its jobs are running out),
    ``cancelled`` (closed and cancelled: its waiting jobs will never run) or
    ``ended`` (every job ended; its callbacks are enqueued). Times are Unix seconds.
    """

    id: str
    state: str
    description: str = ""
    total: int = 0
    pending: int = 0
    done: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0
    started_at: Optional[float] = None
    closed_at: Optional[float] = None
    cancelled_at: Optional[float] = None
    ended_at: Optional[float] = None
    parent: Optional[str] = None
    queues: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    callbacks: dict[str, str] = field(default_factory=dict)  # 'complete'/'success' -> job name

    @property
    def succeeded(self) -> bool:
        """Ended with every job done (what runs ``on_success``)."""
        return self.state == "ended" and self.done == self.total and self.cancelled_at is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "description": self.description,
            "total": self.total,
            "pending": self.pending,
            "done": self.done,
            "failed": self.failed,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "started_at": self.started_at,
            "closed_at": self.closed_at,
            "cancelled_at": self.cancelled_at,
            "ended_at": self.ended_at,
            "parent": self.parent,
            "queues": list(self.queues),
            "children": list(self.children),
            "callbacks": dict(self.callbacks),
        }


def read_status(client: redis.Redis, namespace: str, batch_id: str) -> Optional[BatchStatus]:
    """The status of a batch (None: no such batch, or it expired), with each share
    read live from its queue and each child batch not ended read in turn."""
    raw: dict[bytes, bytes] = client.hgetall(BatchKeys(namespace, batch_id).batch)  # type: ignore[assignment]
    if not raw:
        return None
    h = {k.decode(): v.decode() for k, v in raw.items()}
    counts = Share()
    queues, children = [], []
    for member, value in h.items():
        kind, name = member[:2], member[2:]
        if kind == "q:":
            queues.append(name)
            told = Share.parse(value)
            live = Share.parse(client.hget(QueueKeys(namespace, name).batches, batch_id))
            counts += (live or Share()).most(told)
        elif kind == "k:":
            children.append(name)
            child = Share.parse(value + ",c") if value else None
            if child is None:
                status = read_status(client, namespace, name)
                if status is not None:
                    child = Share(
                        status.total, status.done, status.dead, status.cancelled, status.failed
                    )
            counts += child or Share()
    state = h.get("st", "open")
    if state == "closed" and h.get("cx"):
        state = "cancelled"
    callbacks = {}
    if h.get("cb"):
        specs = orjson.loads(h["cb"])
        callbacks = {kind: specs[kind]["name"] for kind in ("complete", "success") if kind in specs}
    ended = counts.done + counts.dead + counts.cancelled
    return BatchStatus(
        id=batch_id,
        state=state,
        description=h.get("d", ""),
        total=counts.enqueued,
        pending=max(counts.enqueued - ended, 0),
        done=counts.done,
        failed=counts.failed,
        dead=counts.dead,
        cancelled=counts.cancelled,
        started_at=_seconds(h.get("t0")),
        closed_at=_seconds(h.get("tc")),
        cancelled_at=_seconds(h.get("cx")),
        ended_at=_seconds(h.get("te")),
        parent=h.get("parent") or None,
        queues=sorted(queues),
        children=sorted(children),
        callbacks=callbacks,
    )


# -- the batch book's other calls (fastq.producer.batches): the index, the work noted
# for a reaper, the shares due --------------------------------------------------------


def batch_exists(client: redis.Redis, keys: BatchKeys) -> bool:
    return bool(client.exists(keys.batch))


def batch_state(client: redis.Redis, keys: BatchKeys) -> Optional[bytes]:
    """``open``, ``closed`` or ``ended`` (None: no such batch)."""
    state: Optional[bytes] = client.hget(keys.batch, "st")  # type: ignore[assignment]
    return state


def cancelled_ms(client: redis.Redis, keys: BatchKeys) -> Optional[int]:
    """When the batch was cancelled (Unix ms), if it was."""
    raw: Optional[bytes] = client.hget(keys.batch, "cx")  # type: ignore[assignment]
    return int(raw) if raw else None


def queues_joined(client: redis.Redis, keys: BatchKeys) -> list[str]:
    """The queues (shards) whose share the batch holds."""
    members: list[bytes] = client.hkeys(keys.batch)  # type: ignore[assignment]
    return [m.decode()[2:] for m in members if m.startswith(b"q:")]


def add_to_index(client: redis.Redis, keys: BatchKeys, opened_ms: int) -> None:
    client.zadd(keys.index, {keys.batch_id: opened_ms})


def newest_in_index(client: redis.Redis, namespace: str, count: int) -> list[str]:
    """The ids of the ``count`` batches opened last, newest first."""
    newest: list[bytes] = client.zrevrange(BatchKeys(namespace, "").index, 0, count - 1)  # type: ignore[assignment]
    return [raw.decode() for raw in newest]


def drop_from_index(client: redis.Redis, keys: BatchKeys) -> None:
    client.zrem(keys.index, keys.batch_id)


def trim_index(client: redis.Redis, namespace: str, opened_before_ms: int) -> None:
    """Forget the batches opened before ``opened_before_ms`` (expired by then)."""
    client.zremrangebyscore(BatchKeys(namespace, "").index, "-inf", opened_before_ms)


def note_work(client: redis.Redis, keys: BatchKeys, at_ms: int) -> None:
    """Note the batch for a reaper to finish at ``at_ms``, in case its caller dies."""
    client.zadd(keys.work, {keys.batch_id: at_ms})


def drop_work(client: redis.Redis, keys: BatchKeys) -> None:
    client.zrem(keys.work, keys.batch_id)


def work_due(client: redis.Redis, namespace: str, now_ms: int, limit: int = 100) -> list[str]:
    """The batches whose work was due by ``now_ms``, at most ``limit``."""
    work = BatchKeys(namespace, "").work
    late: list[bytes] = client.zrangebyscore(work, "-inf", now_ms, start=0, num=limit)  # type: ignore[assignment]
    return [raw.decode() for raw in late]


def due_shares(client: redis.Redis, queues: list[QueueKeys], *, cluster: bool) -> list[list[str]]:
    """The batches whose share of each queue ended and is not settled yet, by queue
    (sorted ids). One command on one Redis for an idle namespace of any size (a
    cluster's keys are in many slots: one each)."""
    due_keys = [keys.batches_due for keys in queues]
    if not due_keys or not (cluster or client.exists(*due_keys)):
        return [[] for _ in queues]
    pipe = client.pipeline(transaction=False)
    for key in due_keys:
        pipe.smembers(key)
    return [sorted(b.decode() for b in due) for due in pipe.execute()]


def drop_due_share(client: redis.Redis, keys: QueueKeys, batch_id: str) -> None:
    """The batch was told of its share of the queue: it is due no more."""
    client.srem(keys.batches_due, batch_id)


def batched_ids(client: redis.Redis, keys: QueueKeys, batch_id: str) -> Iterator[list[str]]:
    """The ids of one batch's jobs in a queue's batched hash, a scan's page at a time."""
    target = batch_id.encode()
    cursor = 0
    while True:
        cursor, page = hash_page(client, keys.batched, cursor, SCAN_COUNT)
        ids = [job_id.decode() for job_id, b in page.items() if b == target]
        if ids:
            yield ids
        if cursor == 0:
            return
