"""Which queues a reaper's sweep calls ``reap`` on: its idle work grows with the
queues that have work, not with every queue the namespace ever knew.

A queue is *hot* while its last ``reap`` found something to watch: a lease (a
worker holds jobs) or a scheduled job (delayed, or a retry waiting). Hot queues are
reaped every sweep, as the reaper always did. The others are *idle*: once a sweep
(every ``interval_s`` at most), one bulk probe asks whether any of them has a lease
or a scheduled job now (on a single Redis, one ``EXISTS`` over the keys of
``PROBE_CHUNK`` queues; on a cluster, where keys of two queues are two slots, one
``EXISTS`` per queue, pipelined): those that do are reaped at once, and are hot from
then on. What else ``reap`` does for an idle queue (trim its dead set, its cancel
markers and its lapsed unique locks) waits for its turn, once every
``TRIM_EVERY_S``, the turns spread over that time, and only for a queue that has one
of those (probed the same way). A queue the reaper has not seen before is reaped at
once.
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable

import redis

from fastq.connection import cluster
from fastq.protocol.contracts import ReapReply
from fastq.protocol.introspect import which_exist
from fastq.protocol.keys import QueueKeys

# queues per EXISTS of the bulk probe on a single Redis (two keys each)
PROBE_CHUNK = 500
# how often an idle queue's dead set, cancel markers and unique locks are trimmed
TRIM_EVERY_S = 60.0


class QueueWatch:
    """The hot and idle queues of one reaper, and when each idle one is trimmed next.

    ``keys_of(queue)``: the queue's keys. ``interval_s``: the idle queues of a node are
    probed this often at most."""

    def __init__(self, keys_of: Callable[[str], QueueKeys], interval_s: float) -> None:
        self.keys_of = keys_of
        self.interval_s = interval_s
        self.hot: set[str] = set()
        self._trim_at: dict[str, float] = {}  # idle queue -> monotonic time of its next trim
        self._work_keys: dict[str, tuple[str, ...]] = {}  # what makes a queue hot
        self._trim_keys: dict[str, tuple[str, ...]] = {}  # what an idle one's trim trims
        self._probed_at: dict[str, float] = {}  # node name -> monotonic time of its last probe
        self.round_trips = 0  # the probes' (the caller tells from it whether Redis answered)

    def to_reap(
        self, client: redis.Redis, node: str, queues: list[str], *, probe: bool = False
    ) -> list[str]:
        """The queues of ``queues`` (node ``node``'s) to reap in this sweep: the hot
        ones, the new ones, the idle ones the probe finds work in, and the idle ones
        whose trim is due. ``probe``: probe the idle ones even if they were a moment
        ago (after an outage: only an answer ends it).

        Raises:
            a Redis error: the probe failed.
        """
        now = time.monotonic()
        out: list[str] = []
        idle: list[str] = []
        for queue in queues:
            if queue in self.hot or queue not in self._trim_at:
                out.append(queue)
            else:
                idle.append(queue)
        # (a sweep may come a hair early: its sleep was computed before this one)
        if idle and (probe or now - self._probed_at.get(node, -math.inf) >= 0.9 * self.interval_s):
            found = set(self._probe(client, idle, self._work_keys, _work_keys))
            self._probed_at[node] = now
        else:
            found = set()
        out += [q for q in idle if q in found]
        due = [q for q in idle if q not in found and self._trim_at[q] <= now]
        if due:
            out += self._probe(client, due, self._trim_keys, _trim_keys)
            for queue in due:  # those with nothing to trim: their next turn
                self._trim_at[queue] = now + TRIM_EVERY_S
        return out

    def reaped(self, queue: str, reply: ReapReply) -> None:
        """Note what the ``reap`` of ``queue`` found."""
        watch = reply.next_deadline_ms >= 0 or reply.next_due_ms >= 0
        if watch or reply.expired_workers or reply.promoted:
            self.hot.add(queue)
        else:
            self.hot.discard(queue)
        first = queue not in self._trim_at
        # the first turns spread over TRIM_EVERY_S: a reaper that starts over 20,000
        # queues does not reap them all again at once a minute later
        self._trim_at[queue] = time.monotonic() + TRIM_EVERY_S * (random.random() if first else 1.0)

    def forget(self, known: set[str]) -> None:
        """Drop what is kept of the queues not in ``known`` (no longer listed)."""
        for table in (self._trim_at, self._work_keys, self._trim_keys):
            for queue in [q for q in table if q not in known]:
                del table[queue]
        self.hot &= known

    def _probe(
        self,
        client: redis.Redis,
        queues: list[str],
        cache: dict[str, tuple[str, ...]],
        keys_of: Callable[[QueueKeys], tuple[str, ...]],
    ) -> list[str]:
        """The queues of ``queues`` that have one of their keys ``keys_of`` names
        (kept in ``cache``): one round trip, a second one only when a chunk has some."""

        def keys(queue: str) -> tuple[str, ...]:
            found = cache.get(queue)
            if found is None:
                found = cache[queue] = keys_of(self.keys_of(queue))
            return found

        chunk = 1 if cluster.is_cluster(client) else PROBE_CHUNK
        chunks = [queues[i : i + chunk] for i in range(0, len(queues), chunk)]
        found = which_exist(
            client, [[key for queue in part for key in keys(queue)] for part in chunks]
        )
        busy = [part for part, n in zip(chunks, found) if n]
        self.round_trips += 1
        if chunk == 1 or not busy:
            return [queue for part in busy for queue in part]
        candidates = [queue for part in busy for queue in part]
        found = which_exist(client, [list(keys(queue)) for queue in candidates])
        return [queue for queue, n in zip(candidates, found) if n]


def _work_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (keys.leases, keys.scheduled)


def _trim_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (keys.dead, keys.cancelled, keys.unique_exp)
