"""Cancel jobs from the outside, by id or by tag, in bounded calls of ``cancel.lua``.

A cancelled job loses its envelope and gets a marker in the queue's ``cancelled``
zset (id -> when). Ready, scheduled and priority jobs never run: scheduled and
priority ones leave their index at once; ids in the ready list stay there until a
claim pops them and drops them (removing an id from a list is O(N) per id, far too
slow for a blast). A job a worker holds (running, or claimed with its batch)
still runs, but its retry, death or return to the queue is dropped; if it
completes, its ack takes it out of the cancelled count. Markers are trimmed by the
reaper after the dead jobs' max age.

Cancelling by tag takes at most ``batch`` of the tag's entries per call, so that
cancelling a 30,000-job blast never blocks Redis for long.
"""

from __future__ import annotations

from typing import Sequence

import redis

from fastq.protocol.contracts import CANCEL, CANCEL_BATCH_MAX
from fastq.protocol.keys import QueueKeys

# ids per cancel call: a few ms of Redis time (bench/cancel_cost.py); removing an
# entry of the tag index (a zset of equal scores, ordered by member) costs most
CANCEL_BATCH = 250


def cancel_ids(client: redis.Redis, keys: QueueKeys, ids: Sequence[str]) -> int:
    """Cancel the jobs ``ids`` of one queue; returns how many were cancelled (those
    unknown, done, dead, broken or cancelled already are not)."""
    ks = CANCEL.keys_for(keys)
    total = 0
    for lo in range(0, len(ids), CANCEL_BATCH):
        chunk = ids[lo : lo + CANCEL_BATCH]
        total += CANCEL.call(client, ks, CANCEL.argv("", len(chunk), chunk)).cancelled
    return total


def cancel_by_tag(client: redis.Redis, keys: QueueKeys, tag: str, batch: int = CANCEL_BATCH) -> int:
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
    ks = CANCEL.keys_for(keys)
    argv = CANCEL.argv(tag, batch)
    calls_left = client.zlexcount(keys.tagged, f"[{tag}\n", f"({tag}\x0b") // batch + 1
    total = 0
    while calls_left > 0:
        reply = CANCEL.call(client, ks, argv)
        total += reply.cancelled
        calls_left -= 1
        if reply.handled < batch:  # no entry of the tag is left
            break
    return total
