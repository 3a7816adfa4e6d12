"""A worker's queues as it serves them: the logical queues of ``-q`` in priority
order, each one or more queues in Redis (its shards, :mod:`fastq.protocol.shards`).

The one place a logical queue becomes its shards for a worker: the round trip,
the pump and the lease keeper see every shard (each is a queue to the scripts);
the empty-claim decision (:mod:`fastq.worker.decide`), the batch sizers, the heartbeat's
queue index and the pool's hand-backs see logical queues.

**Rotation.** The shards of one queue are equals, not priorities. Each round trip
that claims from a sharded queue claims one shard and *peeks* at the others (the
plain reads of :mod:`fastq.worker.roundtrip`, in rotation order: the shards after the one
claimed, wrapping around); the first that shows work is the one claimed next. So
a worker moves on to the next shard with work after every batch (no shard with
work waits more than K-1 batches of this worker), an empty shard costs a peek,
never a round trip of its own, and work sitting in one shard only is found by
the first round trip whatever shard the worker started on. Each worker starts at
a random shard so that a pool's children do not all begin on the same one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Optional

from fastq.protocol.keys import shard_names
from fastq.protocol.shards import shard_of


class QueueLayout:
    """The shards of each of ``queues`` (``counts``: queue -> shards; absent: one)."""

    def __init__(
        self, queues: Sequence[str], counts: dict[str, int], rng: Optional[random.Random] = None
    ) -> None:
        rng = rng or random.Random()
        self.logical = list(queues)
        self.shards = [shard_names(q, counts.get(q, 1)) for q in self.logical]
        self.physical = [name for names in self.shards for name in names]
        # a shard's logical queue (its index in the -q order) and its own index
        self.index_of: dict[str, int] = {}
        self._shard_at: dict[str, int] = {}
        for i, names in enumerate(self.shards):
            for s, name in enumerate(names):
                self.index_of[name] = i
                self._shard_at[name] = s
        self._at = [rng.randrange(len(names)) for names in self.shards]

    def sharded(self, index: int) -> bool:
        return len(self.shards[index]) > 1

    def claim_name(self, index: int) -> str:
        """The shard of ``queues[index]`` to claim from next."""
        return self.shards[index][self._at[index]]

    def others(self, index: int) -> list[str]:
        """The other shards of ``queues[index]``, in rotation order after the one
        claimed next: what a round trip claiming it peeks at."""
        names, at = self.shards[index], self._at[index]
        return names[at + 1 :] + names[:at]

    def found_work(self, name: str) -> None:
        """A peek saw work in shard ``name``: its queue claims from it next."""
        self._at[self.index_of[name]] = self._shard_at[name]

    def rate_home(self, name: str, rate_key: str) -> str:
        """The shard that keeps a per-key rate limit's state for jobs of shard
        ``name``: the key's shard of the logical queue, so that one key has one
        state whatever shard its jobs are in."""
        index = self.index_of.get(name)
        if index is None:
            return name
        names = self.shards[index]
        return names[shard_of(rate_key, len(names))]
