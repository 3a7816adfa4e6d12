"""A process's entry in the worker registry (:mod:`fastq.protocol.workers`), kept
by a thread of its own: a pool's master announces itself and its children, a
``fastq worker`` run alone itself (a pool's children do not announce)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable, Optional

import psutil

from fastq._version import __version__
from fastq.connection.clock import RedisClock
from fastq.connection.faults import REDIS_ERRORS, unanswered
from fastq.connection.url import mask_url
from fastq.protocol import workers
from fastq.protocol.workers import registry_key

log = logging.getLogger("fastq.registry")
# the registry's reading of Redis' clock: a skew is the reaper's to tell, once
_clock_log = logging.getLogger("fastq.registry.clock")
_clock_log.setLevel(logging.ERROR)

ANNOUNCE_EVERY_S = 2.0  # an entry lapses after five missed (workers.TTL_S)
LOOK_EVERY_S = 0.25  # how soon a pool's new or dead child shows


def process_fields(
    kind: str, pid: int, queues: list[str], redis_url: str, namespace: str
) -> dict[str, Any]:
    """What every entry says of the process that announces it."""
    try:
        started_at = psutil.Process(pid).create_time()
    except psutil.Error:
        started_at = time.time()
    return {
        "kind": kind,
        "host": socket.gethostname(),
        "pid": pid,
        "started_at": round(started_at, 3),
        "queues": list(queues),
        "redis": mask_url(redis_url),
        "namespace": namespace,
        "version": __version__,
    }


class Announcer(threading.Thread):
    """Announces ``snapshot()`` as entry ``entry_id`` every ``every_s`` until
    ``stop()``, which withdraws it. Redis trouble never reaches the process it
    announces, nor its log (at DEBUG only: the process' own connections report an
    outage): the next announcement tries again.

    Args:
        new_client: makes the thread's own client (short timeouts: it must never
            hold a stop, or a pool's fork, for long).
        snapshot: the entry's fields now (called from this thread).
        gate: a pool's fork gate (:class:`fastq.pool.handback.HandBacks`).
        changes: a cheap look at what the entry shows (a pool's children): looked
            at every :data:`LOOK_EVERY_S`, and announced at once when it changes.
    """

    def __init__(
        self,
        new_client: Callable[[], Any],
        namespace: str,
        entry_id: str,
        snapshot: Callable[[], dict[str, Any]],
        who: str,
        every_s: float = ANNOUNCE_EVERY_S,
        gate: Optional[threading.Lock] = None,
        changes: Optional[Callable[[], object]] = None,
    ) -> None:
        super().__init__(name="fastq-registry", daemon=True)
        self.new_client = new_client
        self.namespace = namespace
        self.key = registry_key(namespace)
        self.entry_id = entry_id
        self.snapshot = snapshot
        self.every_s = every_s
        self.changes = changes
        self._clock = RedisClock(who, _clock_log)
        self._stopped = threading.Event()
        self._client: Optional[Any] = None
        # a pool's fork gate: held through each announcement's I/O (Redis, logging,
        # psutil), so that no child is forked while this thread holds a lock
        self._gate = gate or threading.Lock()

    def run(self) -> None:
        last = self.changes() if self.changes else None
        self.announce()
        next_at = time.monotonic() + self.every_s
        while not self._stopped.wait(min(LOOK_EVERY_S, self.every_s)):
            now = self.changes() if self.changes else None
            if now != last or time.monotonic() >= next_at:
                last = now
                self.announce()
                next_at = time.monotonic() + self.every_s
        self._withdraw()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout_s)

    def announce(self) -> None:
        try:
            entry = self.snapshot()  # shared memory and /proc: no lock of the process
        except Exception:  # a bug here must not end the announcements, nor go unseen
            with self._gate:
                log.exception("worker registry: could not announce %s", self.entry_id)
            return
        with self._gate:  # only the Redis I/O: a pool's fork waits on it
            self._send(entry)

    def _send(self, entry: dict[str, Any]) -> None:
        try:
            client = self._client = self._client or self.new_client()
            now_ms = self._clock.now_ms(client, self.key)  # the registry's node's clock
            workers.announce(client, self.namespace, self.entry_id, entry, now_ms)
        except REDIS_ERRORS as exc:
            # the process' own connections say it once per outage; this one keeps
            # quiet (an entry that lapses meanwhile comes back with Redis)
            log.debug("worker registry: could not announce %s: %s", self.entry_id, exc)
            if self._client is not None and unanswered(exc):
                self._client.close()
                self._client = None  # a fresh client next time
            return

    def _withdraw(self) -> None:
        with self._gate:
            self._withdraw_entry()

    def _withdraw_entry(self) -> None:
        if self._client is None:
            return
        try:
            workers.withdraw(self._client, self.namespace, self.entry_id)
        except REDIS_ERRORS as exc:  # it lapses by itself
            log.debug("worker registry: could not withdraw %s: %s", self.entry_id, exc)
        finally:
            self._client.close()
