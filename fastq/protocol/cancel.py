"""Cancel jobs from the outside, by id or by tag, in bounded calls of ``cancel.lua``.

A cancelled job loses its envelope and gets a marker in the queue's ``cancelled``
zset (id -> when). Ready, scheduled and priority jobs are *stopped*: they never
run; scheduled and priority ones leave their index at once; ids in the ready list
stay there until a claim pops them and drops them (removing an id from a list is
O(N) per id, far too slow for a blast). Stopped jobs are counted ``cancelled`` in
the queue's stats and leave a ``cancelled`` record. A job a worker already *held*
(running, or claimed with its batch) may still run, so it is reported apart: its
retry, death or return to the queue is dropped (then it is counted and recorded
cancelled); if it completes, it counts as processed. Markers are trimmed by the
reaper after the dead jobs' max age.

The script tells held from stopped by the held sets of every worker holding a
lease on the queue, which are read first and passed to it; it refuses the call
(nothing written) if the workers changed meanwhile, and the call is made again.

Cancelling by tag takes at most ``batch`` of the tag's entries per call, so that
cancelling a 30,000-job blast never blocks Redis for long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import redis

from fastq.connection.typed import unchecked
from fastq.protocol.contracts import CANCEL, CANCEL_BATCH_MAX, CancelReply
from fastq.protocol.keys import QueueKeys

# ids per cancel call: a few ms of Redis time (bench/cancel_cost.py); removing an
# entry of the tag index (a zset of equal scores, ordered by member) costs most
CANCEL_BATCH = 250


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: ``stopped`` jobs will never run (the queue's ``cancelled``
    stat counts them); ``held`` jobs were cancelled while a worker held them
    (running, or claimed with its batch): they may still run, and count as
    processed if they complete, else as cancelled then. True when it cancelled
    anything; ``total`` is both."""

    stopped: int = 0
    held: int = 0

    @property
    def total(self) -> int:
        return self.stopped + self.held

    def __bool__(self) -> bool:
        return self.total > 0

    def __add__(self, other: Cancelled) -> Cancelled:
        return Cancelled(self.stopped + other.stopped, self.held + other.held)


# calls refused because the workers holding leases changed between the read and the
# call, before giving up (each refusal means a worker came or went meanwhile)
_ATTEMPTS = 50


def cancel_call(
    client: redis.Redis, keys: QueueKeys, tag: str, limit: int, ids: Sequence[Any]
) -> CancelReply:
    """One cancel call, with the held sets of every worker now holding a lease."""
    fixed = CANCEL.keys_for(keys)
    for _ in range(_ATTEMPTS):
        workers = [w.decode() for w in client.zrange(keys.leases, 0, -1)]  # type: ignore[union-attr]
        ks = fixed + [keys.held(w) for w in workers]
        reply = CANCEL.call(client, ks, CANCEL.argv(tag, limit, workers, ids))
        if not reply.stale:
            return reply
    raise RuntimeError(f"cancel: the workers of queue {keys.queue} kept changing; try again")


def cancel_ids(client: redis.Redis, keys: QueueKeys, ids: Sequence[str]) -> Cancelled:
    """Cancel the jobs ``ids`` of one queue (those unknown, done, dead, broken or
    cancelled already are not)."""
    total = Cancelled()
    for lo in range(0, len(ids), CANCEL_BATCH):
        chunk = ids[lo : lo + CANCEL_BATCH]
        reply = cancel_call(client, keys, "", len(chunk), chunk)
        total += Cancelled(reply.stopped, reply.held)
    return total


def cancel_by_tag(
    client: redis.Redis, keys: QueueKeys, tag: str, batch: int = CANCEL_BATCH
) -> Cancelled:
    """Cancel every live job of one queue tagged ``tag``, ``batch`` at a time.

    Each call takes the entries it handles out of the tag index. Jobs a busy
    producer tags meanwhile are not chased forever: at most as many calls as the
    entries there at the start need, plus one.

    Raises:
        ValueError: ``batch`` out of range.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= CANCEL_BATCH_MAX:
        raise ValueError(
            f"cancel: batch must be an int within 1..{CANCEL_BATCH_MAX}, not {batch!r}"
        )
    # zlexcount is untyped in redis-py 7
    calls_left: int = (
        unchecked(client).zlexcount(keys.tagged, f"[{tag}\n", f"({tag}\x0b") // batch + 1
    )
    total = Cancelled()
    while calls_left > 0:
        reply = cancel_call(client, keys, tag, batch, ())
        total += Cancelled(reply.stopped, reply.held)
        calls_left -= 1
        if reply.handled < batch:  # no entry of the tag is left
            break
    return total
