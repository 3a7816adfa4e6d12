"""How the operator's methods see a sharded queue (:mod:`fastq.protocol.shards`): by its name,
through the keys of each of its shards."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Optional

from redis import Redis

from fastq.protocol.keys import QueueKeys, validate_queue_name
from fastq.protocol.shards import ShardCounts, keys_of, shard_of


def valid_name(queue: str) -> bool:
    """A name in the set of known queues may come from a foreign producer."""
    try:
        validate_queue_name(queue)
    except (TypeError, ValueError):
        return False
    return True


class ShardViews:
    """A queue's shards for :class:`fastq.admin.operator.Admin` (the App provides what is
    declared below)."""

    namespace: str
    shard_counts: ShardCounts

    if TYPE_CHECKING:

        @property
        def redis(self) -> Redis: ...

        def queues(self) -> list[str]: ...

        def queues_on(self, client: Redis) -> list[str]: ...

        def _producer_call(self) -> AbstractContextManager[None]: ...

    def _shards(self, queue: str, client: Optional[Redis] = None) -> list[QueueKeys]:
        """The keys of every shard of ``queue`` (one for a queue that is not
        sharded), shard 0 first: its count as Redis records it."""
        count = self.shard_counts.count(client or self.redis, self.namespace, queue)
        return keys_of(self.namespace, queue, count)

    def _shards_for_id(self, queue: str, job_id: str) -> list[QueueKeys]:
        """The shards of ``queue`` to look for ``job_id`` in: the shard its id routes
        to first (where an enqueue that named the id put it), then the others."""
        shards = self._shards(queue)
        first = shard_of(job_id, len(shards))
        return [shards[first], *shards[:first], *shards[first + 1 :]]

    def shards(self, queue: str) -> int:
        """How many shards ``queue`` has (1: not sharded), as Redis records it or
        this app declares it.

        Raises:
            TypeError, ValueError: an invalid queue name.
            fastq.ShardCountMismatch: this app declares another count.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        validate_queue_name(queue)
        with self._producer_call():
            return len(self._shards(queue))

    def physical_queues(self, queues: Optional[list[str]] = None) -> list[str]:
        """The queues in Redis behind ``queues`` (default: :meth:`queues`): each
        queue's shards, for what sweeps every one (the reaper).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self._producer_call():
            return self.physical_queues_on(self.redis, queues)

    def physical_queues_on(self, client: Redis, queues: Optional[list[str]] = None) -> list[str]:
        """:meth:`physical_queues`, read with ``client`` (the reaper's own), raising
        what it raises."""
        names = self.queues_on(client) if queues is None else queues
        counts = self.shard_counts.resolve(
            client, self.namespace, [q for q in names if valid_name(q)]
        )
        return [k.queue for q in names for k in keys_of(self.namespace, q, counts.get(q, 1))]
