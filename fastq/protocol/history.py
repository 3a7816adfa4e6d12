"""The per-queue history of jobs done and failed, read for the dashboard's charts.

The pool writes it inside the ack script (no extra round trip): one hash per queue,
``NS:{Q}:history``, a ring of :data:`SLOTS` slots of :data:`SLOT_MS` (two hours).
Field: the slot's index ``i = (slot_ms / SLOT_MS) % SLOTS`` as a decimal string;
value: ``"<slot_ms>:<processed>:<failed>"``, ``slot_ms`` the start of the slot on
Redis' clock. A value whose ``slot_ms`` is not the slot asked for is a lap of the
ring ago: stale, and read as 0. Every dashboard process reads the same counts.
"""

from __future__ import annotations

from typing import Any

from fastq.protocol.keys import QueueKeys

SLOT_MS = 10_000
SLOTS = 720
MAX_WINDOW_S = SLOT_MS * SLOTS // 1000


def history_key(keys: QueueKeys) -> str:
    return keys.history


def check_window_s(window_s: object) -> int:
    """``window_s`` as whole seconds within 10..7200 (the ring's two hours).

    Raises:
        ValueError: another value.
    """
    if isinstance(window_s, bool) or not isinstance(window_s, (int, float)):
        raise ValueError(f"window_s must be a number of seconds, not {window_s!r}")
    if not SLOT_MS // 1000 <= window_s <= MAX_WINDOW_S:
        raise ValueError(f"window_s must be within 10..{MAX_WINDOW_S} s, not {window_s!r}")
    return int(window_s)


def _parse(value: Any) -> tuple[int, int, int]:
    """``(slot_ms, processed, failed)`` of a stored value; (-1, 0, 0): unreadable."""
    try:
        text = value.decode() if isinstance(value, bytes) else str(value)
        slot_ms, processed, failed = text.split(":")
        return int(slot_ms), int(processed), int(failed)
    except (UnicodeDecodeError, ValueError):
        return -1, 0, 0


def read_history(
    client: Any, keys: QueueKeys, window_s: float = 3600
) -> list[tuple[int, int, int]]:
    """The slots of the last ``window_s`` seconds of a queue (one shard), oldest
    first, ending with the slot Redis' ``TIME`` falls in: ``(slot_ms, processed,
    failed)``; a slot with no value, or a stale one, counts 0.

    Raises:
        ValueError: a window outside 10..7200 s.
    """
    count = check_window_s(window_s) * 1000 // SLOT_MS
    # apart, not in one pipeline: a cluster's pipeline refuses TIME
    seconds, micros = client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    last_ms = now_ms - now_ms % SLOT_MS
    slots = [last_ms - n * SLOT_MS for n in range(count - 1, -1, -1)]
    # only the window's fields (an hour: half the ring)
    stored = client.hmget(history_key(keys), [str((t // SLOT_MS) % SLOTS) for t in slots])
    out = []
    for slot_ms, value in zip(slots, stored):
        found = _parse(value) if value is not None else None
        if found is not None and found[0] == slot_ms:
            out.append(found)
        else:
            out.append((slot_ms, 0, 0))
    return out


def merge(histories: list[list[tuple[int, int, int]]]) -> list[tuple[int, int, int]]:
    """The slot-by-slot sums of several histories of the same window (a sharded
    queue's shards, or every queue of the overview), by slot time. Read one after
    the other, they may end a slot apart (a slot began between two reads): the
    window keeps its length, from the newest slot back."""
    sums: dict[int, list[int]] = {}
    for history in histories:
        for slot_ms, processed, failed in history:
            both = sums.setdefault(slot_ms, [0, 0])
            both[0] += processed
            both[1] += failed
    length = max((len(history) for history in histories), default=0)
    merged = [(slot_ms, p, f) for slot_ms, (p, f) in sorted(sums.items())]
    return merged[len(merged) - length :]
