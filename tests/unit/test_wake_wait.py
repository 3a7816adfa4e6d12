"""The idle wait both wires share (``fastq.worker.wire.base.wait_until``): block
until shortly before the deadline, then poll to it (no Redis: the BLPOP and the
LMPOP are stand-ins)."""

from __future__ import annotations

import time

from fastq.worker.wire.base import BLPOP_OVERSHOOT_S, WAKE_POLL_S, wait_until


def test_a_token_brought_by_the_blocking_wait_ends_it_without_a_poll() -> None:
    asked: list[float] = []
    polls: list[float] = []

    def block(blocking_s: float) -> bool:
        asked.append(blocking_s)
        return True

    assert wait_until(time.monotonic() + 2.0, block, lambda: bool(polls.append(1)))
    assert polls == []
    # it blocks until BLPOP_OVERSHOOT_S before the deadline (Redis ends a BLPOP late)
    assert 2.0 - BLPOP_OVERSHOOT_S - 0.05 < asked[0] <= 2.0 - BLPOP_OVERSHOOT_S


def test_a_deadline_nearer_than_the_overshoot_is_polled_to_within_a_poll() -> None:
    blocked: list[float] = []
    polls = 0

    def poll() -> bool:
        nonlocal polls
        polls += 1
        return False

    start = time.monotonic()
    deadline = start + BLPOP_OVERSHOOT_S / 3
    assert not wait_until(deadline, lambda s: bool(blocked.append(s)), poll)
    ended = time.monotonic()
    assert blocked == []  # no BLPOP: it would end on Redis' next tick, past the deadline
    assert polls >= 2
    assert ended >= deadline - WAKE_POLL_S
    assert ended - deadline < 0.5  # loose: a loaded machine sleeps late


def test_a_token_found_by_a_poll_ends_the_wait() -> None:
    answers = iter([False, False, True])
    start = time.monotonic()
    assert wait_until(start + 5.0, lambda s: False, lambda: next(answers))
    assert time.monotonic() - start < 4.0
