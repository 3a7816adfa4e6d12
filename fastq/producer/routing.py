"""Where the jobs of an enqueue go: which script call (which queue in Redis, a shard
of a sharded queue) takes which of them, in chunks of at most ``ENQUEUE_CHUNK``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from fastq.options import EnqueueOptions
from fastq.producer.unique import UniquePlan
from fastq.protocol.keys import shard_names
from fastq.protocol.shards import ShardCounts, shard_of
from fastq.validate import MAX_JOBS_PER_CALL, MAX_JOBS_PER_CALL_EXTRAS

# One enqueue script call carries at most this many jobs (the script refuses more).
# A call is atomic, also against OOM (Redis refuses a script's write only when it is
# the script's first), so a chunk goes in whole or not at all.
ENQUEUE_CHUNK = MAX_JOBS_PER_CALL
# ... and this many when they carry tags or unique locks: each job then costs the
# script two to four times as much, and one call must stay short
ENQUEUE_CHUNK_EXTRAS = MAX_JOBS_PER_CALL_EXTRAS

# One script call of an enqueue: the queue in Redis (a shard of a sharded queue) and
# the indexes of its jobs among the call's (a range for a run of them).
Part = tuple[str, Sequence[int]]


def pick(items: Sequence[Any], at: Sequence[int]) -> Sequence[Any]:
    if isinstance(at, range):
        return items[at.start : at.stop]
    return [items[i] for i in at]


def chunk_size(options: EnqueueOptions, unique: Optional[UniquePlan]) -> int:
    """Jobs per enqueue script call."""
    return ENQUEUE_CHUNK if options.tags is None and unique is None else ENQUEUE_CHUNK_EXTRAS


def runs(at: Sequence[int], chunk: int) -> list[Sequence[int]]:
    """``at`` in runs of at most ``chunk`` (one script call each)."""
    return [at[lo : lo + chunk] for lo in range(0, len(at), chunk)]


def even_runs(n: int, shards: int) -> list[range]:
    """Jobs 0..n-1 in ``shards`` contiguous runs whose sizes differ by one at most.

    Fresh ids are spread evenly rather than a chunk per shard in turn: a blast of
    any size then gives every shard (every node) the same share to drain, and a
    sharded queue's rate limit, split evenly over its shards, runs at its whole
    rate until the blast is nearly done."""
    base, extra = divmod(n, shards)
    out, lo = [], 0
    for s in range(shards):
        hi = lo + base + (1 if s < extra else 0)
        out.append(range(lo, hi))
        lo = hi
    return out


def plan_calls(
    shard_counts: ShardCounts,
    queue: str,
    shards: int,
    n: int,
    chunk: int,
    options: EnqueueOptions,
    route_keys: Optional[Sequence[str]],
) -> list[Part]:
    """The script calls of an enqueue of ``n`` jobs: which queue (shard) each
    chunk goes to. One shard: runs of ``chunk`` jobs. Sharded: every job to the
    shard of its ``route_keys`` entry (a unique key, or an id the caller chose,
    so that enqueueing it again finds it), or all to ``shard_key``'s, or fresh
    ids spread evenly (:func:`even_runs`)."""
    if shards == 1:
        return [(queue, run) for run in runs(range(n), chunk)]
    names = shard_names(queue, shards)
    if options.shard_key is not None:
        home = names[shard_of(options.shard_key, shards)]
        return [(home, run) for run in runs(range(n), chunk)]
    if route_keys is None:
        used = min(n, shards)
        # the turn moves on past the shards that took one job more (n mod K), so
        # that calls whose size K does not divide even out over time
        first = shard_counts.next_turn(n % shards)
        return [
            (names[(first + s) % shards], run)
            for s, share in enumerate(even_runs(n, used))
            for run in runs(share, chunk)
        ]
    by_shard: dict[int, list[int]] = {}
    for i, key in enumerate(route_keys):
        by_shard.setdefault(shard_of(key, shards), []).append(i)
    return [
        (names[shard], run) for shard, at in sorted(by_shard.items()) for run in runs(at, chunk)
    ]
