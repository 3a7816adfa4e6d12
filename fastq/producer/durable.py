"""Durable enqueue: the enqueue script calls, then ``WAIT`` for the replicas, in one
round trip (``App(min_replicas=n)``; off by default).

Redis replicates asynchronously: a job the master took but had not passed on when
it died is lost in the failover. ``WAIT n timeout_ms`` answers how many replicas
have acknowledged the last write *of its own connection*, so it goes in the same
pipeline as the script calls, behind them: it costs the wait, not a round trip.

In front of it goes a barrier, ``HINCRBY stats enqueued 0``: it changes nothing but
is replicated. ``WAIT`` is documented to cover the connection's own writes, and a
retry whose ids all exist writes none; the master has one replication stream, so
the barrier's offset covers every write it took before, the jobs of an earlier
attempt (on any connection) included. (Redis today records the offset after any
command of the connection, a write or not; the barrier does not rely on it.)

On a Redis Cluster a call's keys are all one queue's, so one slot and one master:
the pipeline goes through a plain client of that master, one connection in order.
The cluster pipeline would resend a redirected call alone, on another connection,
where ``WAIT`` does not see it. A call answered ``MOVED`` did not run: the slot map
is read again and it is sent once more, with a barrier and a ``WAIT`` of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import redis
from redis import Redis
from redis.exceptions import MovedError, NoScriptError

from fastq.connection import cluster
from fastq.connection.faults import REDIS_ERRORS
from fastq.connection.url import mask_url
from fastq.errors import NotReplicated
from fastq.protocol import scripts
from fastq.protocol.keys import QueueKeys
from fastq.validate import is_finite

# Below the producer's socket timeout (30 s), so that a WAIT is answered before its
# connection gives up on it (and redis-py resends the whole blast).
MAX_REPLICA_TIMEOUT_S = 20.0
# Round trips of one call at most: a resend after NOSCRIPT or MOVED, then one more
ROUNDS = 3


@dataclass(frozen=True)
class Durability:
    """How many replicas must confirm an enqueue, and how long to wait for them."""

    min_replicas: int
    timeout_s: float

    @property
    def timeout_ms(self) -> int:
        # WAIT 0 would block forever: a timeout under 1 ms waits 1 ms
        return max(1, round(self.timeout_s * 1000))


def durability(min_replicas: object, replica_timeout_s: object) -> Optional[Durability]:
    """The checked options of ``App(min_replicas=..., replica_timeout_s=...)``; None
    when off (``min_replicas=0``).

    Raises:
        TypeError: ``min_replicas`` not an int, or the timeout not a number.
        ValueError: ``min_replicas`` < 0, or the timeout not a finite number of
            seconds in (0, ``MAX_REPLICA_TIMEOUT_S``].
    """
    if isinstance(min_replicas, bool) or not isinstance(min_replicas, int):
        raise TypeError(f"min_replicas must be an int, not {min_replicas!r}")
    if min_replicas < 0:
        raise ValueError(f"min_replicas must be >= 0 (0: do not wait), not {min_replicas}")
    if isinstance(replica_timeout_s, bool) or not isinstance(replica_timeout_s, (int, float)):
        raise TypeError(f"replica_timeout_s must be a number of seconds, not {replica_timeout_s!r}")
    if not (is_finite(replica_timeout_s) and 0 < replica_timeout_s <= MAX_REPLICA_TIMEOUT_S):
        raise ValueError(
            f"replica_timeout_s must be a finite number of seconds in (0, "
            f"{MAX_REPLICA_TIMEOUT_S:g}], not {replica_timeout_s!r}"
        )
    return Durability(min_replicas, float(replica_timeout_s)) if min_replicas else None


@dataclass(frozen=True)
class Confirmation:
    """What the replicas said of one call's writes.

    ``replicas``: the fewest that a round trip's ``WAIT`` counted (None: nothing
    was written, nothing to confirm); ``error``: what Redis answered instead of a
    count, to the barrier or to ``WAIT`` (a refused write, ``NOPERM``, a demoted
    master).
    """

    replicas: Optional[int]
    error: Optional[Exception]

    def enough(self, wanted: Durability) -> bool:
        if self.error is not None:
            return False
        return self.replicas is None or self.replicas >= wanted.min_replicas


def call_many(
    client: redis.Redis, commands: Sequence[scripts.Command], barrier_key: str, wanted: Durability
) -> tuple[list[Any], Confirmation]:
    """Send ``commands`` (script calls on ``barrier_key``'s queue) as
    :func:`fastq.protocol.scripts.call_many` does with ``raise_on_error=False``, each round
    trip ending in a barrier and ``WAIT``; return their replies and what the
    replicas confirmed. Raises what stopped it from reading the replies."""
    rc = client if cluster.is_cluster(client) else None
    target = client  # where the last round trip went
    fewest: Optional[int] = None
    error: Optional[Exception] = None

    def send(calls: list[scripts.Command]) -> list[Any]:
        nonlocal target, fewest, error
        target = cluster.node_client(rc, barrier_key) if rc is not None else client
        try:
            *replies, barrier, waited = scripts.call_then_wait(
                target, calls, barrier_key, wanted.min_replicas, wanted.timeout_ms
            )
        except REDIS_ERRORS:
            if rc is not None:
                cluster.refresh_slots(rc)  # a failover: the next call finds the new master
            raise
        if any(not isinstance(r, Exception) for r in (*replies, barrier)):
            # this round trip wrote: its own WAIT must confirm it
            if isinstance(barrier, Exception) or isinstance(waited, Exception):
                error = error or (barrier if isinstance(barrier, Exception) else waited)
            else:
                fewest = int(waited) if fewest is None else min(fewest, int(waited))
        return replies

    def reload(again: list[int]) -> None:
        if any(isinstance(replies[i], NoScriptError) for i in again):
            scripts.load_all(target)
        if rc is not None and any(isinstance(replies[i], MovedError) for i in again):
            cluster.refresh_slots(rc)

    replies = send(list(commands))
    # a call answered NOSCRIPT or MOVED did not run: sent again, with a barrier and
    # a WAIT of its own
    scripts.resend_unloaded(
        commands, replies, send, reload, not_run=(NoScriptError, MovedError), rounds=ROUNDS - 1
    )
    return replies, Confirmation(fewest, error)


def send(
    client: Redis,
    names: list[str],
    commands: list[scripts.Command],
    keys: Callable[[str], QueueKeys],
    wanted: Durability,
) -> tuple[list[Any], Confirmation]:
    """The calls with a ``WAIT`` for the replicas: behind all of them on one
    Redis (one replication stream); one round per shard on a cluster (a
    ``WAIT`` counts its own connection's writes, one node's)."""
    shards = list(dict.fromkeys(names))
    one_node = len(shards) == 1 or not cluster.is_cluster(client)
    if one_node:
        return call_many(client, commands, keys(shards[0]).stats, wanted)
    replies: list[Any] = [None] * len(commands)
    fewest: Optional[int] = None
    error: Optional[Exception] = None
    for shard in shards:
        at = [i for i, name in enumerate(names) if name == shard]
        got, confirmed = call_many(client, [commands[i] for i in at], keys(shard).stats, wanted)
        for i, reply in zip(at, got):
            replies[i] = reply
        error = error or confirmed.error
        if confirmed.replicas is not None:
            fewest = confirmed.replicas if fewest is None else min(fewest, confirmed.replicas)
    return replies, Confirmation(fewest, error)


def check_replicated(
    wanted: Optional[Durability],
    ids: list[str],
    confirmed: Optional[Confirmation],
    retry: str,
    redis_url: str,
) -> None:
    """Raise NotReplicated unless the replicas confirmed the call's writes."""
    if wanted is None or confirmed is None or confirmed.enough(wanted):
        return
    replicas = 0 if confirmed.error is not None else (confirmed.replicas or 0)
    jobs = f"{len(ids)} job{'s are' if len(ids) > 1 else ' is'}"
    what = f"{jobs} in Redis at {mask_url(redis_url)}"
    if confirmed.error is not None:
        why = f"the replicas could not be waited for ({confirmed.error})"
    else:
        why = (
            f"{replicas} of the {wanted.min_replicas} replicas asked for "
            f"(App(min_replicas=...)) confirmed within {wanted.timeout_s:g} s"
        )
    raise NotReplicated(
        f"{what}, but {why}: a failover now could lose them; retry with {retry} "
        "(idempotent: it adds nothing twice and waits again)",
        ids=ids,
        replicas=replicas,
        min_replicas=wanted.min_replicas,
    ) from confirmed.error
