"""The waiting jobs of a queue, a page at a time: ready (priority ones first, then
the ready list from its front) and scheduled (soonest due first). For the
dashboard's queue page; bounded reads (a page is at most :data:`MAX_PAGE` ids).
And what a worker asks of its queues' scheduled jobs: when the first is due, how
many wait."""

from __future__ import annotations

import dataclasses
from typing import Optional

import redis

from fastq.connection.typed import sync_reply
from fastq.protocol.introspect import JobInfo, _listed
from fastq.protocol.keys import QueueKeys, grouped_id

MAX_PAGE = 500
WAITING = ("queued", "scheduled")


def _ready_ids(client: redis.Redis, keys: QueueKeys, start: int, count: int) -> list[bytes]:
    """Ids ``start`` to ``start + count`` of the ready jobs: the prio zset's, then the
    list's from its right end (the front), in the order of their claims; then the
    grouped jobs', group by group (their claims take the groups in turn)."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.prio)
    pipe.llen(keys.ready)
    n_prio, n_ready = (int(n) for n in pipe.execute())
    ids: list[bytes] = []
    if start < n_prio:
        ids += client.zrange(keys.prio, start, min(start + count, n_prio) - 1)  # type: ignore[arg-type]
    rest = count - len(ids)
    first = max(start - n_prio, 0)
    if rest > 0 and first < n_ready:
        # the front is the right end: index -1 is the next claimed
        chunk: list[bytes] = client.lrange(keys.ready, -(first + rest), -(first + 1))  # type: ignore[assignment]
        ids += list(reversed(chunk))
    rest = count - len(ids)
    if rest > 0:
        at = max(start - n_prio - n_ready, 0)
        members: list[bytes] = client.zrange(keys.group_ready, at, at + rest - 1)  # type: ignore[assignment]
        ids += [grouped_id(m) for m in members]
    return ids


def waiting_count(client: redis.Redis, keys: QueueKeys, state: str) -> int:
    """How many jobs of ``state`` (``queued`` or ``scheduled``) one queue holds."""
    if state == "queued":
        pipe = client.pipeline(transaction=False)
        pipe.zcard(keys.prio)
        pipe.llen(keys.ready)
        pipe.zcard(keys.group_ready)
        return sum(int(n) for n in pipe.execute())
    return int(sync_reply(client.zcard(keys.scheduled)))


def waiting_jobs(
    client: redis.Redis, keys: QueueKeys, state: str, start: int, count: int
) -> list[JobInfo]:
    """Up to ``count`` jobs of ``state`` (``queued`` or ``scheduled``) from the
    ``start``-th, each with its name, arguments, attempts so far, and for a
    scheduled one when it is due. An id whose envelope is gone (a cancelled job
    not yet popped) is shown ``cancelled``."""
    if state == "queued":
        ids = _ready_ids(client, keys, start, count)
        due: list[Optional[float]] = [None] * len(ids)
    else:
        pairs: list[tuple[bytes, float]] = client.zrange(  # type: ignore[assignment]
            keys.scheduled, start, start + count - 1, withscores=True
        )
        ids = [job_id for job_id, _ in pairs]
        due = [score / 1000.0 for _, score in pairs]
    if not ids:
        return []
    envelopes: list[Optional[bytes]] = client.hmget(keys.jobs, ids)  # type: ignore[assignment]
    out = []
    for job_id, raw, due_at in zip(ids, envelopes, due):
        info = _listed(job_id.decode(), keys, state if raw is not None else "cancelled", raw)
        out.append(dataclasses.replace(info, due_at=due_at))
    return out


def first_due_ms(client: redis.Redis, queues: list[QueueKeys]) -> list[Optional[int]]:
    """When the first scheduled job of each queue is due (ms; None: none), in one
    round trip."""
    pipe = client.pipeline(transaction=False)
    for keys in queues:
        pipe.zrange(keys.scheduled, 0, 0, withscores=True)
    return [int(first[0][1]) if first else None for first in pipe.execute()]


def scheduled_count(client: redis.Redis, queues: list[QueueKeys]) -> int:
    """The scheduled jobs of ``queues``, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for keys in queues:
        pipe.zcard(keys.scheduled)
    return sum(pipe.execute())
