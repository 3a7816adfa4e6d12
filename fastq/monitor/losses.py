"""Noticing that Redis lost its data, by the markers of
:mod:`fastq.protocol.markers` (what they are, and the Redis calls that read and
write them).

Every long-running process (a worker, a pool's master, a reaper) keeps a
:class:`LossWatch`: it notes the token of each queue's marker when it first sees
the queue (writing the marker if there is none: a fresh namespace is no loss),
and looks again every ``CHECK_S``. A marker gone, or holding another token (another
process found it gone first and wrote it anew), means the data of that queue was
lost: the process logs one ERROR naming what it held there, writes the marker
anew and goes on. One look costs one ``GET`` per Redis (per master of a cluster):
a marker of each node's queues in turn; all of that node's only once one is lost.
A worker ticks its watch from its lease thread; a pool's master and a reaper, from
a :class:`LossWatchThread`.

What it cannot see: a loss before the process first looked, and a partial one (a
Redis restarted from an RDB snapshot older than its last writes keeps the markers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Callable, Optional

import redis

from fastq.connection import cluster
from fastq.connection.faults import REDIS_ERRORS
from fastq.protocol import markers

# How often a process looks at the markers of its queues.
CHECK_S = 2.0
# Ids (and queues) named in the log line at most.
NAMED_MAX = 20

# what makes (or returns) a client; what reads the queues to watch with it
Connect = Callable[[], redis.Redis]
Queues = Callable[[redis.Redis], Iterable[str]]

# what the ERROR line gives as the likely causes
_CAUSES = "a FLUSHDB or FLUSHALL, a restart without persistence, or a failover to an empty replica?"


def named(items: Sequence[str], what: str = "") -> str:
    """``items`` joined by commas, at most ``NAMED_MAX`` of them, then how many more."""
    shown = ", ".join(items[:NAMED_MAX])
    more = len(items) - NAMED_MAX
    return shown if more <= 0 else f"{shown} and {more} more{what}"


# what a process holds in Redis, by queue: the ids of the jobs in its hands
Held = dict[str, list[bytes]]


class LossWatch:
    """The markers a process saw, and the check that they are still there.

    Args:
        namespace: the app's.
        who: the process, as its log lines name it (``worker <id>``, ``reaper``).
        logger: where the ERROR goes.
        held: what the process holds (a worker: its jobs, see
            :meth:`fastq.worker.pump.Pump.held`), read from the checking thread
            before each look. On a loss it names those that no longer exist (a job
            claimed after the loss does).
        lost_what: given the queues whose data was lost, what this process held
            there, when it holds no jobs (default: the queues' jobs and sets).
        check_s: how often ``tick`` looks.
    """

    def __init__(
        self,
        namespace: str,
        who: str,
        logger: logging.Logger,
        *,
        held: Optional[Callable[[], Held]] = None,
        lost_what: Optional[Callable[[list[str]], str]] = None,
        check_s: float = CHECK_S,
    ) -> None:
        self.namespace = namespace
        self.who = who
        self.log = logger
        self.held = held
        self.lost_what = lost_what
        self.check_s = check_s
        self.tokens: dict[str, bytes] = {}  # queue -> its marker's value, as last seen
        self.losses = 0  # the losses it logged
        self._next_check = 0.0  # time.monotonic()
        self._turn = 0  # which queue of each node is looked at
        self._bug_logged = False

    def tick(self, connect: Connect, queues: Queues) -> None:
        """``check`` if ``check_s`` passed since the last one: ``connect`` (what
        makes the client) and ``queues`` (what reads the queues with it) are called
        only then. Never raises: a Redis error leaves the check to the next tick;
        anything else is logged once."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + self.check_s
        self.check_now(connect, queues)

    def check_now(self, connect: Connect, queues: Queues) -> None:
        """``check`` now, never raising (as ``tick``); the next tick is ``check_s`` on."""
        self._next_check = time.monotonic() + self.check_s
        try:
            client = connect()
            self.check(client, queues(client))
        except REDIS_ERRORS as exc:
            self.log.debug("%s: the markers could not be read (%s)", self.who, exc)
        except Exception:  # a bug: said once, and never takes the process down
            if not self._bug_logged:
                self._bug_logged = True
                self.log.exception("%s: checking the markers of its queues failed", self.who)

    def check(self, client: redis.Redis, queues: Iterable[str]) -> list[str]:
        """Note the markers of the queues not seen yet (writing those missing), and
        look at one marker of the queues seen on each Redis (each master of a
        cluster); if it is lost, at all of that node's. Logs one ERROR for what
        was lost, writes those markers anew; returns the queues lost.

        Raises:
            a Redis error: nothing was logged; the next check looks again.
        """
        seen = list(self.tokens)
        fresh = [q for q in dict.fromkeys(queues) if q not in self.tokens]
        lost: list[str] = []
        gone: list[str] = []
        if seen:
            groups = cluster.by_node(client, seen, self._key)
            self._turn += 1
            samples = [group[self._turn % len(group)] for _, group in groups]
            suspects = [
                q
                for (_, group), sample, value in zip(groups, samples, self._read(client, samples))
                if value != self.tokens[sample]
                for q in group
            ]
            if suspects:
                values = self._read(client, suspects)
                lost = [q for q, value in zip(suspects, values) if value != self.tokens[q]]
                gone = [q for q, value in zip(suspects, values) if value is None]
        # read once the markers were: what a failed look consumes nothing
        held_now = self.held() if self.held is not None else {}
        if lost or fresh:
            self._mark(client, lost + fresh)
        if lost:
            self.losses += 1
            if self.held is not None:
                what = self._held_lost(client, lost, held_now)
            elif self.lost_what is not None:
                what = self.lost_what(lost)
            else:
                what = f"the jobs, schedules, dead and broken sets of queues {named(lost)} are gone"
            markers = named([self._key(q) for q in lost], " markers")
            one = len(lost) == 1
            if gone:
                how = "marker %s is gone" if one else "markers %s are gone"
            else:  # another process found them gone first
                how = "marker %s was written anew" if one else "markers %s were written anew"
            self.log.error(
                "%s: Redis lost its data (the %s: %s): %s",
                self.who,
                how % markers,
                _CAUSES,
                what,
            )
        return lost

    def _held_lost(self, client: redis.Redis, lost: list[str], held_now: Held) -> str:
        """The jobs held on the queues ``lost`` that no longer exist (a job claimed
        after the loss does)."""
        candidates = [
            (q, these) for q in lost if (these := list(dict.fromkeys(held_now.get(q, ()))))
        ]
        ids = [
            i.decode(errors="replace")
            for i in markers.missing_jobs(client, self.namespace, candidates)
        ]
        kind = self.who.split()[0]
        if not ids:
            return f"this {kind} held no job there"
        jobs = "1 job" if len(ids) == 1 else f"{len(ids)} jobs"
        return f"{jobs} this {kind} held no longer exist: ids {named(ids)}"

    def _key(self, queue: str) -> str:
        return markers.marker_key(self.namespace, queue)

    def _read(self, client: redis.Redis, queues: list[str]) -> list[Optional[bytes]]:
        return markers.read_markers(client, self.namespace, queues)

    def _mark(self, client: redis.Redis, queues: list[str]) -> None:
        """Write the markers missing among those of ``queues`` and note what each holds
        (one written meanwhile by another process: theirs)."""
        for q, value in zip(queues, markers.write_markers(client, self.namespace, queues)):
            if value is None:  # gone again at once: looked at anew next time
                self.tokens.pop(q, None)
            else:
                self.tokens[q] = value


class LossWatchThread(threading.Thread):
    """A thread that ticks ``watch`` every ``watch.check_s``, for a process whose
    main loop must not wait on Redis (a pool's master). ``gate``: held while it
    does I/O (Redis, logging), as the master's other threads do before a fork."""

    def __init__(
        self,
        watch: LossWatch,
        connect: Callable[[], redis.Redis],
        queues: Queues,
        gate: Optional[threading.Lock] = None,
    ) -> None:
        super().__init__(name="fastq-loss-watch", daemon=True)
        self.watch = watch
        self.connect = connect
        self.queues = queues
        self.gate = gate or threading.Lock()
        self._client: Optional[redis.Redis] = None
        self._stop_event = threading.Event()

    def start(self) -> None:
        """The first look, then the thread: a master looks before it forks, so its
        markers are noted before any child of its holds a job."""
        with self.gate:
            self.watch.check_now(self._connected, self.queues)
        super().start()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(self.watch.check_s)

    def run(self) -> None:
        while not self._stop_event.wait(self.watch.check_s):
            with self.gate:
                if self._stop_event.is_set():
                    break
                self.watch.check_now(self._connected, self.queues)
        if self._client is not None:
            with self.gate:
                self._client.close()

    def _connected(self) -> redis.Redis:
        if self._client is None:
            self._client = self.connect()
        return self._client
