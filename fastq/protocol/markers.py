"""The markers by which a process notices that Redis lost its data: an operator's
``FLUSHDB``, a Redis restarted without persistence, a failover to an empty replica.

Each queue in Redis has a marker, ``<namespace>:{q}:marker``: a string written
once (``SET NX``), holding when it was written and a random token. It lives in the
queue's slot, so a Redis Cluster node that loses its data loses the markers of its
queues with them; nothing of fastq ever deletes it (a drain, a purge, a cancel leave it).

Here are the Redis calls of a look at them; who looks, how often and what it says is
:class:`fastq.monitor.losses.LossWatch`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Optional

import redis

from fastq.protocol.keys import QueueKeys


def marker_key(namespace: str, queue: str) -> str:
    """The marker of queue ``queue`` (a queue in Redis: a shard is a queue of its own)."""
    return QueueKeys(namespace, queue).marker


def new_token() -> bytes:
    """A marker's value: when it was written (Unix ms) and a random token."""
    return f"{int(time.time() * 1000)}:{os.urandom(6).hex()}".encode()


def read_markers(
    client: redis.Redis, namespace: str, queues: Sequence[str]
) -> list[Optional[bytes]]:
    """The value of each queue's marker (``None``: gone), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for q in queues:
        pipe.get(marker_key(namespace, q))
    return [None if v is None else bytes(v) for v in pipe.execute()]


def write_markers(
    client: redis.Redis, namespace: str, queues: Sequence[str]
) -> list[Optional[bytes]]:
    """Write the markers missing among those of ``queues`` (``SET NX``: one written
    meanwhile by another process stays), and return what each holds now (``None``:
    gone again at once), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for q in queues:
        pipe.set(marker_key(namespace, q), new_token(), nx=True)
        pipe.get(marker_key(namespace, q))
    replies = pipe.execute()
    return [None if v is None else bytes(v) for v in replies[1::2]]


def missing_jobs(
    client: redis.Redis, namespace: str, held: Sequence[tuple[str, Sequence[bytes]]]
) -> list[bytes]:
    """Of the ids ``held`` on each queue (``(queue, ids)``), those whose job no longer
    exists, in one round trip."""
    if not held:
        return []
    pipe = client.pipeline(transaction=False)
    for q, ids in held:
        pipe.hmget(QueueKeys(namespace, q).jobs, list(ids))
    missing: list[bytes] = []
    for (_, ids), envelopes in zip(held, pipe.execute()):
        missing += [i for i, e in zip(ids, envelopes) if e is None]
    return missing
