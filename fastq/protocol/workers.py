"""The worker registry: who serves the queues now.

Each pool's master (and each ``fastq worker`` run alone) announces itself every
:data:`fastq.monitor.announcer.ANNOUNCE_EVERY_S` in one hash of the namespace,
``NS:workers`` (entry id → JSON): its host, pid, queues, Redis, when it started,
and per child its state, the job it runs and since when, its memory and the jobs it
finished. Each entry carries when it lapses, by Redis' clock
(:class:`fastq.connection.clock.RedisClock`, so a host whose clock is off neither
hides nor keeps an entry); a process that stops withdraws its entry, and one that
dies lapses within :data:`TTL_S`. Readers drop the lapsed entries as they read
(``fastq workers``, ``fastq stats``, ``fastq wait``, the dashboard). Not a queue's
key: no script needs it, and one hash costs a namespace a few hundred bytes per pool.

Here are the entries' Redis calls; the thread that announces a process is
:class:`fastq.monitor.announcer.Announcer`.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from fastq.connection.clock import RedisClock
from fastq.protocol.keys import NamespaceKeys

# the registry's reading of Redis' clock: a skew is the reaper's to tell, once
_clock_log = logging.getLogger("fastq.registry.clock")
_clock_log.setLevel(logging.ERROR)

# An entry lapses this long after it was written: five announcements missed, the
# process is gone (or cut off).
TTL_S = 10.0


def registry_key(namespace: str) -> str:
    return NamespaceKeys(namespace).workers


def live_entries(client: Any, namespace: str) -> list[dict[str, Any]]:
    """The entries that have not lapsed, oldest pool first; lapsed ones are dropped
    from Redis as a side effect (best effort: another reader may drop them too)."""
    key = registry_key(namespace)
    clock = RedisClock("worker registry", _clock_log)
    clock.read(client, key)  # the clock its writers read: on a cluster, its master's
    raw = client.hgetall(key)
    now_ms = clock.now_ms()
    live: list[dict[str, Any]] = []
    lapsed: list[Any] = []
    for field, value in raw.items():
        try:
            entry = orjson.loads(value)
            expires_at = float(entry["expires_at"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            lapsed.append(field)  # not an entry of ours: unreadable, so dropped
            continue
        if expires_at <= now_ms:
            lapsed.append(field)
        else:
            entry["lapses_in_s"] = round((expires_at - now_ms) / 1000, 1)
            live.append(entry)
    if lapsed:
        client.hdel(key, *lapsed)
    live.sort(key=lambda e: (e.get("started_at") or 0, str(e.get("id"))))
    return live


def workers_per_queue(entries: list[dict[str, Any]]) -> dict[str, int]:
    """How many worker processes serve each queue, by the live entries."""
    counts: dict[str, int] = {}
    for entry in entries:
        workers = sum(1 for c in entry.get("children", ()) if c.get("kind") == "worker")
        for queue in entry.get("queues", ()):
            counts[queue] = counts.get(queue, 0) + workers
    return counts


def announce(
    client: Any, namespace: str, entry_id: str, entry: dict[str, Any], now_ms: int
) -> None:
    """Write ``entry`` as entry ``entry_id``, seen at ``now_ms`` (Redis' clock) and
    lapsing :data:`TTL_S` later."""
    entry.update(seen_at=now_ms, expires_at=now_ms + int(TTL_S * 1000))
    client.hset(registry_key(namespace), entry_id, orjson.dumps(entry))


def withdraw(client: Any, namespace: str, entry_id: str) -> None:
    """Drop entry ``entry_id`` (a process that stops)."""
    client.hdel(registry_key(namespace), entry_id)
