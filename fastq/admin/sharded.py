"""How the operator's methods see a sharded queue (:mod:`fastq.protocol.shards`): by its name,
through the keys of each of its shards."""

from __future__ import annotations

from typing import Optional

from redis import Redis

from fastq.protocol.keys import QueueKeys, validate_queue_name
from fastq.protocol.shards import keys_of, shard_of
from fastq.protocol.store import Store


def valid_name(queue: str) -> bool:
    """A name in the set of known queues may come from a foreign producer."""
    try:
        validate_queue_name(queue)
    except (TypeError, ValueError):
        return False
    return True


class Sharded:
    """A queue's shards as Redis records them (or the app declares them), for the
    operator's methods: each takes a sharded queue by its name."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def of(self, queue: str, client: Optional[Redis] = None) -> list[QueueKeys]:
        """The keys of every shard of ``queue`` (one for a queue that is not
        sharded), shard 0 first: its count as Redis records it."""
        store = self.store
        count = store.shard_counts.count(client or store.redis, store.namespace, queue)
        return keys_of(store.namespace, queue, count)

    def for_id(self, queue: str, job_id: str) -> list[QueueKeys]:
        """The shards of ``queue`` to look for ``job_id`` in: the shard its id routes
        to first (where an enqueue that named the id put it), then the others."""
        shards = self.of(queue)
        first = shard_of(job_id, len(shards))
        return [shards[first], *shards[:first], *shards[first + 1 :]]

    def physical(self, client: Redis, names: list[str]) -> list[str]:
        """The queues in Redis behind the queues ``names``: each one's shards."""
        namespace = self.store.namespace
        counts = self.store.shard_counts.resolve(
            client, namespace, [q for q in names if valid_name(q)]
        )
        return [k.queue for q in names for k in keys_of(namespace, q, counts.get(q, 1))]
