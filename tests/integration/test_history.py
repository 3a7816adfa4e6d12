"""The history reader (fastq.protocol.history) over values written with HSET as the
ack script writes them: the window ends at Redis' clock, stale laps are ignored, a
sharded queue's shards are summed, and App.history answers the same."""

from __future__ import annotations

import pytest
import redis

import fastq
from fastq.protocol.history import SLOT_MS, SLOTS, history_key, read_history


def _now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _write(r: redis.Redis, key: str, slot_ms: int, processed: int, failed: int) -> None:
    r.hset(key, str((slot_ms // SLOT_MS) % SLOTS), f"{slot_ms}:{processed}:{failed}")


def test_history_reads_the_window_ending_now(app: fastq.App, r: redis.Redis) -> None:
    app.declare_queue("h")
    keys = app.keys("h")
    key = history_key(keys)
    assert key == f"{app.namespace}:{{h}}:history"
    for _ in range(3):  # again if Redis' clock crossed into the next slot meanwhile
        r.delete(key)
        now = _now_ms(r)
        last = now - now % SLOT_MS
        _write(r, key, last, 7, 1)
        _write(r, key, last - 5 * SLOT_MS, 30, 0)
        _write(r, key, last - 359 * SLOT_MS, 2, 2)  # the window's first slot
        _write(r, key, last - 360 * SLOT_MS, 99, 99)  # just outside the hour
        # a lap of the ring ago, in a slot of the window: stale
        _write(r, key, last - 10 * SLOT_MS - SLOTS * SLOT_MS, 50, 5)
        r.hset(key, "junk", "not:a:value")
        history = read_history(r, keys, 3600)
        if history[-1][0] == last:
            break
    assert len(history) == 360
    assert [h[0] for h in history] == [last - n * SLOT_MS for n in range(359, -1, -1)]
    counts = {slot: (p, f) for slot, p, f in history if p or f}
    assert counts == {last: (7, 1), last - 5 * SLOT_MS: (30, 0), last - 359 * SLOT_MS: (2, 2)}
    assert app.history("h")[-1] == (last, 7, 1)
    assert len(app.history("h", window_s=60)) == 6
    assert sum(p for _, p, _ in app.history("h", window_s=7200)) == 7 + 30 + 2 + 99


def test_history_of_an_empty_queue_is_zeros(app: fastq.App) -> None:
    app.declare_queue("quiet")
    history = app.history("quiet", window_s=120)
    assert len(history) == 12
    assert all(p == 0 and f == 0 for _, p, f in history)


def test_history_sums_a_sharded_queues_shards(app: fastq.App, r: redis.Redis) -> None:
    app.declare_queue("sh", shards=2)
    now = _now_ms(r)
    slot = now - now % SLOT_MS - SLOT_MS
    for n, keys in enumerate(app.admin.sharded.of("sh")):
        _write(r, history_key(keys), slot, 10 + n, n)
    assert (slot, 21, 1) in app.history("sh", window_s=60)


@pytest.mark.parametrize("window_s", [0, 5, 7201, "60", True])
def test_history_refuses_a_window_out_of_the_ring(app: fastq.App, window_s: object) -> None:
    app.declare_queue("h")
    with pytest.raises(ValueError, match="window_s"):
        app.history("h", window_s=window_s)  # type: ignore[arg-type]


def test_histories_read_a_slot_apart_merge_into_one_window() -> None:
    """The overview reads each queue's history in turn: a slot that begins between
    two reads must not make the merged window a slot longer (the chart drew 361
    points of a 360-point hour)."""
    from fastq.protocol.history import SLOT_MS, merge

    first = [(n * SLOT_MS, 1, 0) for n in range(0, 360)]
    second = [(n * SLOT_MS, 2, 1) for n in range(1, 361)]  # read a slot later
    merged = merge([first, second])
    assert len(merged) == 360
    assert merged[0] == (SLOT_MS, 3, 1) and merged[-1] == (360 * SLOT_MS, 2, 1)
    assert merge([]) == []
