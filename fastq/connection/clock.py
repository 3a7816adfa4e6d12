"""Redis' clock, carried forward on this host's monotonic clock.

Periodic slots and the reaper's sleeps are instants on Redis' clock, the one clock
every process of every host shares (the scripts judge leases and due times by it).
A host's wall clock may be ahead, behind, or stepped (NTP not synced yet, a VM
resumed): :class:`RedisClock` reads Redis' ``TIME`` now and then and adds the
monotonic time elapsed since, so that no host's wall clock takes part.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Optional

from fastq.connection import cluster

# Redis' clock is read again this often: a step of Redis' own clock (its host's NTP)
# is followed within this long. A reply that carries Redis' time reads it for free.
RESYNC_S = 30.0
# A host clock this far off Redis' is said once (and again when it moves this much).
SKEW_WARN_S = 1.0


class RedisClock:
    """Redis' time now, in Unix ms, without asking Redis each time.

    :meth:`now_ms` with a client reads ``TIME`` when the last reading is older than
    ``resync_s`` (on a cluster, on the master of ``key``); without one, or between
    readings, it adds the monotonic time elapsed since the last reading. Before any
    reading it answers this host's wall clock.
    """

    def __init__(self, who: str, logger: logging.Logger, *, resync_s: float = RESYNC_S) -> None:
        self.who = who
        self.log = logger
        self.resync_s = resync_s
        self._offset_ms: Optional[float] = None  # Redis' ms minus monotonic ms
        self._read_at = -math.inf  # monotonic time of the last reading
        self._told_skew_s: Optional[float] = None
        self.readings = 0  # TIME calls that answered

    @property
    def synced(self) -> bool:
        return self._offset_ms is not None

    def now_ms(self, client: Any = None, key: Any = None) -> int:
        """Redis' time now (Unix ms); with ``client``, read afresh if stale.

        Raises:
            a Redis error: the reading failed (the estimate is left as it was).
        """
        if client is not None and time.monotonic() - self._read_at >= self.resync_s:
            self.read(client, key)
        if self._offset_ms is None:
            return int(time.time() * 1000)
        return int(time.monotonic() * 1000 + self._offset_ms)

    def read(self, client: Any, key: Any = None) -> None:
        """Read Redis' clock with ``TIME`` (on a cluster, on the master of ``key``).

        Raises:
            a Redis error: as the client raised it.
        """
        conn = client
        if cluster.is_cluster(client) and key is not None:
            conn = client.get_redis_connection(cluster.node_of(client, key))
        asked = time.monotonic()
        seconds, micros = conn.time()
        answered = time.monotonic()
        self.readings += 1
        # the reading is taken half-way through the round trip
        self.observe(seconds * 1000 + micros / 1000, (asked + answered) / 2)

    def observe(self, redis_ms: float, at: Optional[float] = None) -> None:
        """Note that Redis' clock said ``redis_ms`` at monotonic time ``at`` (now)."""
        at = time.monotonic() if at is None else at
        self._offset_ms = redis_ms - at * 1000
        self._read_at = at
        skew_s = (time.time() - (time.monotonic() - at)) - redis_ms / 1000
        told = self._told_skew_s
        if abs(skew_s) >= SKEW_WARN_S and (told is None or abs(skew_s - told) >= SKEW_WARN_S):
            self.log.warning(
                "%s: this host's clock is %.1f s %s Redis'; periodic jobs and due times go "
                "by Redis' clock",
                self.who,
                abs(skew_s),
                "ahead of" if skew_s > 0 else "behind",
            )
            self._told_skew_s = skew_s
        elif abs(skew_s) < SKEW_WARN_S and told is not None:
            self.log.info("%s: this host's clock agrees with Redis' again", self.who)
            self._told_skew_s = None
