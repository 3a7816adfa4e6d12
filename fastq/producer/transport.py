"""Where a producer's encoded jobs go: the round trip behind an enqueue.

A :class:`fastq.producer.enqueue.Producer` routes, checks and encodes; its
transport knows which queues exist and keeps the jobs. :class:`RedisTransport`
sends them to Redis, one ``enqueue`` script call per part, pipelined; the test
mode gives a producer an in-memory one instead
(:class:`fastq.producer.testmode.MemoryTransport`), so that the producer's own
checks and encoding run unchanged (dramatiq's ``StubBroker`` stands in for its
broker the same way).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol

from redis.exceptions import ResponseError

from fastq.errors import BatchClosed, UnknownQueue
from fastq.producer import durable
from fastq.producer.batches import current_batch
from fastq.producer.routing import Part, pick
from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE, enqueue_extras
from fastq.protocol.control import add_known_queues
from fastq.protocol.introspect import is_known_queue, known_queues

if TYPE_CHECKING:
    from redis import Redis

    from fastq.job import JobDef
    from fastq.options import EnqueueOptions
    from fastq.producer.durable import Confirmation, Durability
    from fastq.producer.unique import UniquePlan
    from fastq.protocol.store import Store

log = logging.getLogger("fastq.enqueue")


class Transport(Protocol):
    """What a producer sends its jobs through.

    ``in_memory``: the jobs stay in this process (a test mode): what needs Redis'
    scripts (a chain) refuses to run over it. ``declared``: the queues declared
    new on purpose.
    """

    in_memory: bool
    declared: set[str]

    def declare(self, queues: Sequence[str], shards: Optional[int]) -> None:
        """Know ``queues`` as new queues on purpose (``app.declare_queue``);
        with ``shards``, their count is written where workers read it."""

    def forget_queues(self) -> None:
        """Forget which queues the other end knows (the app now points elsewhere)."""

    def open(self, queue: str) -> int:
        """Get ``queue`` ready to take jobs; returns its shard count.

        Raises:
            UnknownQueue: neither this app nor the other end knows ``queue``.
            ShardCountMismatch: this app declares another shard count than Redis'.
        """

    def send(
        self,
        parts: list[Part],
        priority: int,
        options: EnqueueOptions,
        ids: Sequence[str],
        envs: Sequence[bytes],
        unique: Optional[UniquePlan] = None,
        unique_keys: Sequence[str] = (),
    ) -> tuple[list[Any], Optional[Confirmation]]:
        """Keep the jobs of ``parts`` (a queue or shard, and the indexes of its
        jobs in ``ids`` and ``envs``); returns each part's reply (an
        ``EnqueueReply``) or the error it got, and what the replicas confirmed
        (None: not asked). Raises what stopped it from reading the replies."""


def registered(queue: str, registry: Mapping[str, JobDef[Any]], declared: set[str]) -> bool:
    """Does this app know ``queue`` by itself (``"default"``, declared, or a job's)?"""
    return (
        queue == "default" or queue in declared or any(j.queue == queue for j in registry.values())
    )


class RedisTransport:
    """Jobs to Redis: the ``enqueue`` script, one call per part, pipelined.

    Args:
        store: the app's Redis and namespace.
        registry: the app's jobs by name (the queues it knows).
        durability: ``App(min_replicas=...)``'s wait for replicas; None: off.
    """

    in_memory = False

    def __init__(
        self,
        store: Store,
        registry: Mapping[str, JobDef[Any]],
        durability: Optional[Durability],
    ) -> None:
        self.store = store
        self.registry = registry
        self.durability = durability
        self.known: set[str] = set()  # queues this app has added to the namespace's set
        self.declared: set[str] = set()  # declare_queue()'s: new queues on purpose

    def declare(self, queues: Sequence[str], shards: Optional[int]) -> None:
        self.declared.update(queues)
        if not queues:
            return
        with self.store.producer_call():
            client, namespace = self.store.redis, self.store.namespace
            # known to the namespace at once, not at the first enqueue: a server's HTTP
            # door and every other app see the queue now (they read NS:queues)
            add_known_queues(client, namespace, *queues)
            self.known.update(queues)
            if shards is not None:  # the count, in Redis before any job
                self.store.shard_counts.resolve(client, namespace, queues)

    def forget_queues(self) -> None:
        self.known.clear()

    def open(self, queue: str) -> int:
        """Add ``queue`` to the namespace's set before it holds a job; its shard count."""
        client = self.store.redis
        if queue not in self.known:
            namespace = self.store.namespace
            if registered(queue, self.registry, self.declared):
                add_known_queues(client, namespace, queue)
            elif not is_known_queue(client, namespace, queue):
                known = sorted(self._known_to(client))
                if self.registry:  # an app that registers jobs knows its queues
                    raise UnknownQueue(queue, known)
                # a producer that registers no job cannot tell a typo from a queue
                # whose workers have not started yet: it says so, once
                log.warning(
                    "enqueue on queue %r, which Redis does not know yet (known: %s): a "
                    "typo? app.declare_queue(%r) says it is new",
                    queue,
                    ", ".join(known) or "none",
                    queue,
                )
                add_known_queues(client, namespace, queue)
            self.known.add(queue)
        shards = self.store.shard_counts.cached(queue)
        if shards is None:
            shards = self.store.shard_counts.resolve(client, self.store.namespace, [queue])[queue]
        return shards

    def _known_to(self, client: Redis) -> set[str]:
        names = known_queues(client, self.store.namespace)
        return names | {job.queue for job in self.registry.values()} | self.declared

    def send(
        self,
        parts: list[Part],
        priority: int,
        options: EnqueueOptions,
        ids: Sequence[str],
        envs: Sequence[bytes],
        unique: Optional[UniquePlan] = None,
        unique_keys: Sequence[str] = (),
    ) -> tuple[list[Any], Optional[Confirmation]]:
        client = self.store.redis
        due = options.due
        batch = current_batch()
        if batch is not None:  # each queue joins it before its first job of it
            batch.join(client, [name for name, _ in parts])
        extras = enqueue_extras(
            options.tags or (),
            unique.until if unique is not None else None,
            unique.window_ms if unique is not None else 0,
            batch.id if batch is not None else None,
        )
        commands = []
        keys_of: dict[str, list[str]] = {}
        for name, at in parts:
            keys = keys_of.get(name)
            if keys is None:
                keys = keys_of[name] = ENQUEUE.keys_for(self.store.keys(name))
            ukeys = pick(unique_keys, at) if unique is not None else None
            argv = ENQUEUE.argv(priority, due, extras, pick(ids, at), pick(envs, at), ukeys)
            commands.append(ENQUEUE.command(keys, argv))
        confirmed = None
        if self.durability is None:
            replies = scripts.call_many(client, commands, raise_on_error=False)
        else:
            replies, confirmed = durable.send(
                client, [name for name, _ in parts], commands, self.store.keys, self.durability
            )
        out = [r if isinstance(r, Exception) else ENQUEUE.parse(r) for r in replies]
        if batch is not None:
            out = [_batch_refusal(r, batch.id) for r in out]
        return out, confirmed


_BATCH_REFUSED = re.compile(r"batch .* (is (closed|cancelled): no job|was not joined on this)")


def _batch_refusal(reply: Any, batch_id: str) -> Any:
    """The enqueue script's refusal of a batch closed (or ended) since this process
    joined it, as the ``BatchClosed`` a join raises; any other reply as it is."""
    found = _BATCH_REFUSED.search(str(reply)) if isinstance(reply, ResponseError) else None
    return BatchClosed(batch_id, found.group(2) or "ended") if found else reply
