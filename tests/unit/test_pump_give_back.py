"""The pump sends the hand-back of taken at-most-once jobs once: a request whose
reply is lost gives back its other outcomes, to be sent again, but never that."""

from __future__ import annotations

import logging
from typing import Sequence

import pytest
import redis

from fastq.connection.faults import Outage
from fastq.protocol.outcomes import Outcomes
from fastq.worker.pump import Pump


class LostReply:
    """A request written whose reply never comes."""

    def __init__(self, outcomes: dict[str, Outcomes]) -> None:
        self.outcomes = outcomes
        self.release_all = False
        self.written_at = 0.0

    def replied(self) -> bool:
        return False

    def wait_replied(self, timeout_s: float) -> bool:
        return True  # the read raises

    def result(self) -> None:
        raise redis.ConnectionError("the connection dropped")


class FakeRoundTrip:
    def __init__(self) -> None:
        self.give_backs_sent: list[list[tuple[bytes, bytes]]] = []
        self.may_hold_leases = False
        self.fail_write = False
        self.epoch = 0

    def give_up(self, recorded: int = 0) -> None:
        self.epoch = max(self.epoch, recorded) + 1

    def request(
        self,
        outcomes: dict[str, Outcomes],
        claims: Sequence[str] = (),
        n: int = 0,
        *,
        release_all: bool,
        peek: Sequence[str] = (),
    ) -> LostReply:
        if self.fail_write:
            raise redis.ConnectionError("a write cut short")
        self.give_backs_sent.append(list(outcomes["q"].give_back))  # packed as written
        return LostReply(outcomes)


def pending_with_a_give_back() -> Outcomes:
    return Outcomes(
        done=[b"d"],
        failed=1,
        taken_done=[(7, 2)],
        taken_dead=[(b"x", b"{}")],
        give_back=[(b"g1", b'{"id":"g1"}'), (b"g2", b'{"id":"g2"}')],
    )


def test_a_lost_reply_resends_the_outcomes_but_never_the_give_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = FakeRoundTrip()
    log = logging.getLogger("fastq.worker")
    pump = Pump(rt, ["q"], Outage("worker w", log))  # type: ignore[arg-type]
    pump.pending["q"] = pending_with_a_give_back()
    with caplog.at_level(logging.ERROR, logger="fastq.worker"):
        pump.settle()  # the reply is lost
    assert len(rt.give_backs_sent[0]) == 2  # it went out with the first request
    again = pump.pending["q"]
    assert (again.done, again.failed, again.taken_done, again.taken_dead) == (
        [b"d"],
        1,
        [(7, 2)],
        [(b"x", b"{}")],
    )
    assert again.give_back == []
    pump.settle()  # sent again: without it
    assert rt.give_backs_sent[1] == []
    assert "hand-back of 2 at-most-once jobs" in caplog.text and "g1, g2" in caplog.text


def test_a_write_cut_short_drops_the_give_back_too() -> None:
    rt = FakeRoundTrip()
    pump = Pump(rt, ["q"], Outage("worker w", logging.getLogger("fastq.worker")))  # type: ignore[arg-type]
    pump.pending["q"] = pending_with_a_give_back()
    rt.fail_write = True
    pump.settle()
    assert pump.pending["q"].give_back == [] and pump.pending["q"].taken_done == [(7, 2)]
