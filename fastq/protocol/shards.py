"""Sharded queues: one logical queue spread over K queues in Redis (its *shards*),
each with its own hash tag, so that one hot queue uses several Redis Cluster nodes.

- **Names.** Shard 0 is the queue itself (``mailer``), the others ``mailer#1`` ...
  ``mailer#<K-1>`` (:func:`fastq.protocol.keys.shard_names`). To every script a shard is a
  queue: each call still touches one slot. Sharding a queue keeps the jobs it
  holds (they are shard 0's), and a producer or a reaper that does not know the
  count still writes to a shard that workers serve.
- **The count** lives in Redis, in the hash ``<namespace>:shards`` (queue -> K),
  written by ``app.declare_queue(..., shards=K)`` at once, or by the first producer
  or worker of an app that declares it with ``@app.job(..., shards=K)``, and read
  by every other process: a worker started with ``-q mailer``, a producer that
  enqueues by name, the CLI without ``--app``, a producer of another language
  (docs/protocol.md). A queue absent from it has one shard. An app that declares
  another count than Redis' is refused (``fastq.ShardCountMismatch``): changing K
  under running workers would strand jobs (see docs/queues.md).
- **A rate limit** of a sharded queue is the whole queue's, split evenly over its
  shards (:func:`fastq.protocol.control.set_rate_limit`). A queue sharded after it was given
  one has it on shard 0 only: the process that records the count spreads it.
- **Routing** (:func:`shard_of`): a job goes to the shard of its ``shard_key``, of
  its unique key (its lock lives in that shard's slot), or of the id the caller
  gave (so enqueueing an id again finds it); fresh ids are spread evenly, an
  ``enqueue_many`` a contiguous share per shard, starting at the next in turn.
  The hash is CRC-32, the same in every process and language.
"""

from __future__ import annotations

import itertools
import os
import time
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import redis

from fastq.connection.typed import sync_reply, unchecked
from fastq.errors import ShardCountMismatch
from fastq.protocol import control
from fastq.protocol.keys import NamespaceKeys, QueueKeys, shard_names
from fastq.validate import check_queue_name, check_shards

# A queue that neither Redis nor the app says is sharded is taken to have one shard
# for this long, then asked again: a queue sharded meanwhile is seen without a restart.
UNDECLARED_TTL_S = 30.0


def shards_key(namespace: str) -> str:
    return NamespaceKeys(namespace).shards


def shard_of(key: str, shards: int) -> int:
    """The shard a routing key (a ``shard_key``, a unique key, a job id) goes to."""
    return zlib.crc32(key.encode()) % shards if shards > 1 else 0


class ShardCounts:
    """An app's shard counts: those it declares, and what Redis said of the others
    (asked once per queue and process)."""

    def __init__(self) -> None:
        self.declared: dict[str, int] = {}
        self._known: dict[str, tuple[int, float]] = {}  # queue -> (count, valid until)
        # the shard a call's fresh ids start at, in turn; each process starts elsewhere
        self._turn = itertools.count(int.from_bytes(os.urandom(2), "big"))

    def check(self, queue: str, shards: Optional[int]) -> None:
        """Raise what :meth:`declare` would, recording nothing.

        Raises:
            TypeError, ValueError: a bad count, or another count declared before.
        """
        if shards is None:
            return
        check_shards(shards)
        before = self.declared.get(queue)
        if before is not None and before != shards:
            raise ValueError(
                f"queue {queue!r} is declared with shards={before} already, not {shards}"
            )

    def declare(self, queue: str, shards: Optional[int]) -> None:
        """Record that ``queue`` has ``shards`` shards (None: not said here).

        Raises:
            TypeError, ValueError: as :meth:`check`.
        """
        self.check(queue, shards)
        if shards is not None:
            self.declared[queue] = shards
            self._known.pop(queue, None)  # "undeclared: one" no longer holds here

    def forget(self) -> None:
        """Ask Redis again (the app now points elsewhere)."""
        self._known.clear()

    def cached(self, queue: str) -> Optional[int]:
        known = self._known.get(queue)
        if known is None or known[1] < time.monotonic():
            return None
        return known[0]

    def resolve(
        self, client: redis.Redis, namespace: str, queues: Iterable[str], *, strict: bool = True
    ) -> dict[str, int]:
        """The shard count of each of ``queues``: one read of Redis' record for those
        not known yet, and a write of the declared ones it does not hold.

        Raises:
            ShardCountMismatch: this app declares another count than Redis holds
                (``strict=False``: Redis' count, not cached).
            a Redis error: as the client raised it.
        """
        out: dict[str, int] = {}
        ask = []
        for queue in dict.fromkeys(queues):
            count = self.cached(queue)
            if count is None:
                ask.append(queue)
            else:
                out[queue] = count
        if not ask:
            return out
        key = shards_key(namespace)
        stored = _counts(sync_reply(client.hmget(key, ask)))
        missing = [q for q, n in zip(ask, stored) if n is None and q in self.declared]
        if missing:
            pipe = client.pipeline(transaction=False)
            for queue in missing:
                # an int: redis-py 7 types HSETNX's value as str
                pipe.hsetnx(key, queue, unchecked(self.declared[queue]))
            pipe.hmget(key, ask)  # another process may have written first
            *written, now_stored = pipe.execute()
            stored = _counts(now_stored)
            for queue, won in zip(missing, written):
                if won and self.declared[queue] > 1:
                    _spread_rate_limit(client, namespace, queue, self.declared[queue])
        for queue, count in zip(ask, stored):
            declared = self.declared.get(queue)
            if count is not None and declared is not None and count != declared:
                if strict:
                    raise ShardCountMismatch(queue, declared, count, key)
                out[queue] = count
                continue
            ttl = UNDECLARED_TTL_S if count is None and declared is None else float("inf")
            out[queue] = count or declared or 1
            self._known[queue] = (out[queue], time.monotonic() + ttl)
        return out

    def record(self, client: redis.Redis, namespace: str, queue: str, shards: int) -> int:
        """Write ``shards`` as ``queue``'s count in Redis unless Redis holds one (a
        queue declared from outside the app's code: ``PUT /api/v1/queues/{q}``), and
        know it from then on; returns it. Nothing is declared in this app: Redis'
        count is the one every process reads.

        Raises:
            TypeError, ValueError: not a usable count.
            ShardCountMismatch: Redis holds another count, or this app declares one
                (nothing written then).
            a Redis error: as the client raised it.
        """
        check_shards(shards)
        key = shards_key(namespace)
        declared = self.declared.get(queue)
        if declared is not None and declared != shards:
            raise ShardCountMismatch(queue, shards, declared, key)
        pipe = client.pipeline(transaction=False)
        # an int: redis-py 7 types HSETNX's value as str
        pipe.hsetnx(key, queue, unchecked(shards))
        pipe.hget(key, queue)
        won, stored = pipe.execute()
        count = _counts([stored])[0] or 1
        if count != shards:
            raise ShardCountMismatch(queue, shards, count, key)
        if won and shards > 1:
            _spread_rate_limit(client, namespace, queue, shards)
        self._known[queue] = (count, float("inf"))
        return count

    def count(self, client: redis.Redis, namespace: str, queue: str) -> int:
        cached = self.cached(queue)
        return cached if cached is not None else self.resolve(client, namespace, [queue])[queue]

    def next_turn(self, chunks: int = 1) -> int:
        """The first of ``chunks`` turns (each a shard in turn)."""
        first = next(self._turn)
        for _ in range(chunks - 1):
            next(self._turn)
        return first


def _spread_rate_limit(client: redis.Redis, namespace: str, queue: str, shards: int) -> None:
    """A queue just sharded: the rate limit it had (on what is now its shard 0) is
    set on every shard, as the whole queue's (each shard takes its share)."""
    limit = control.rate_limit(client, QueueKeys(namespace, queue))
    if limit is not None:
        for keys in keys_of(namespace, queue, shards):
            control.set_rate_limit(client, keys, limit, shards)


def _counts(values: Sequence[Any]) -> list[Optional[int]]:
    """Redis' record of counts: a value that is not a usable count is one shard."""
    out: list[Optional[int]] = []
    for value in values:
        try:
            out.append(check_shards(int(value)) if value is not None else None)
        except (TypeError, ValueError):
            out.append(None)
    return out


def recorded(client: redis.Redis, namespace: str) -> dict[str, int]:
    """Every queue Redis records with more than one shard (valid names only)."""
    out = {}
    for name, value in sync_reply(client.hgetall(shards_key(namespace))).items():
        queue = name.decode() if isinstance(name, bytes) else str(name)
        try:
            check_queue_name(queue)
        except ValueError:
            continue
        count = _counts([value])[0]
        if count is not None and count > 1:
            out[queue] = count
    return out


def keys_of(namespace: str, queue: str, shards: int) -> list[QueueKeys]:
    """The keys of every shard of ``queue``, shard 0 first."""
    return [QueueKeys(namespace, name) for name in shard_names(queue, shards)]


def sum_stats(per_shard: Sequence[dict[str, int]]) -> dict[str, int]:
    """A sharded queue's stats: the sum of its shards' counts; ``paused`` if any
    shard is paused; the rate limit fields of shard 0 (the whole queue's limit);
    ``shards``: how many."""
    if len(per_shard) == 1:
        return per_shard[0]
    out: dict[str, int] = {}
    for stats in per_shard:
        for name, value in stats.items():
            out[name] = out.get(name, 0) + value
    out["paused"] = max(stats["paused"] for stats in per_shard)
    for name in ("rate", "rate_period_ms", "rate_burst"):
        out[name] = per_shard[0][name]
    out["shards"] = len(per_shard)
    return out
