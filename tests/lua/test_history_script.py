"""lib/history.lua: the acks count jobs done and failed by 10-second slot of Redis'
clock, in the ring the dashboard's charts read (fastq.protocol.history)."""

from __future__ import annotations

import pytest
import redis
from test_scripts import ack, claim, enqueue, env

from fastq.protocol.contracts import ACK_TAKEN, TAKE
from fastq.protocol.history import SLOT_MS, SLOTS, read_history
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def totals(r: redis.Redis, k: QueueKeys) -> tuple[int, int]:
    """Done and failed over the last minute (a slot boundary crossed meanwhile
    splits them over two slots; the sums stay)."""
    history = read_history(r, k, 60)
    return sum(p for _, p, _ in history), sum(f for _, _, f in history)


def test_an_ack_counts_its_done_and_failed_jobs_in_the_slot_of_now(
    r: redis.Redis, k: QueueKeys
) -> None:
    enqueue(r, k, ["a", "b", "c", "d"])
    claim(r, k, "w1", 4)
    retry = [(b"d", 0, env("d"))]
    ack(r, k, "w1", Outcomes(done=[b"a", b"b", b"c"], retry=retry, failed=1))
    assert totals(r, k) == (3, 1)
    enqueue(r, k, ["e"])
    claim(r, k, "w1", 2)
    ack(r, k, "w1", Outcomes(done=[b"e", b"d"]))
    assert totals(r, k) == (5, 1)
    assert r.hlen(k.history) in (1, 2)  # one field a slot: no per-job writes


def test_a_value_a_lap_of_the_ring_old_is_replaced_not_added_to(
    r: redis.Redis, k: QueueKeys
) -> None:
    for _ in range(3):  # again if Redis' clock crosses a slot boundary meanwhile
        r.delete(k.history)
        seconds, micros = r.time()
        now = int(seconds) * 1000 + int(micros) // 1000
        slot = now - now % SLOT_MS
        field = str((slot // SLOT_MS) % SLOTS)
        r.hset(k.history, field, f"{slot - SLOTS * SLOT_MS}:50:5")  # two hours ago
        enqueue(r, k, [f"x{slot}"])
        claim(r, k, "w1", 1)
        ack(r, k, "w1", Outcomes(done=[f"x{slot}".encode()]))
        if r.hget(k.history, field) == f"{slot}:1:0".encode():
            break
    assert r.hget(k.history, field) == f"{slot}:1:0".encode()


def test_at_most_once_jobs_done_are_counted_once(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["x", "y"])
    claim(r, k, "w1", 2)
    TAKE.call(r, TAKE.keys_for(k, "w1"), TAKE.argv([b"x", b"y"]))
    argv = ACK_TAKEN.argv(10**9, 1000, [(1, 2)], done_ids=[b"x", b"y"])
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), argv)
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), argv)  # resent: seq 1 counted already
    assert totals(r, k) == (2, 0)
