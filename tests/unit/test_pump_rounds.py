"""The pump's rounds (a peek and several claims in one request): the claims come
out one by one in order, the peek's finding once, and nothing is lost when a
round's replies cannot be read or the worker stops with claims in hand."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import redis

from fastq.batch import Outcomes
from fastq.pump import Pump
from fastq.redis_faults import Outage


@dataclass
class FakeReply:
    ids: list[bytes]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class FakeClaim:
    queue: str
    reply: FakeReply

    def __len__(self) -> int:
        return len(self.reply)


@dataclass
class FakeRequest:
    outcomes: dict[str, Outcomes]
    claims: Sequence[str]
    peek: Sequence[str]
    release_all: bool
    rt: FakeRoundTrip
    peeked: Optional[str] = None

    def result(self) -> list[FakeClaim]:
        if self.rt.fail_reads:
            raise redis.ConnectionError("lost")
        self.peeked = next((q for q in self.peek if self.rt.jobs.get(q)), None)
        return [FakeClaim(q, FakeReply(self.rt.jobs.pop(q, []))) for q in self.claims]


@dataclass
class FakeRoundTrip:
    jobs: dict[str, list[bytes]] = field(default_factory=dict)
    fail_reads: bool = False
    requests: list[FakeRequest] = field(default_factory=list)
    may_hold_leases: bool = False

    def request(
        self,
        outcomes: dict[str, Outcomes],
        claims: Sequence[str] = (),
        n: int = 0,
        *,
        release_all: bool = False,
        peek: Sequence[str] = (),
    ) -> FakeRequest:
        self.requests.append(FakeRequest(outcomes, claims, peek, release_all, self))
        return self.requests[-1]


def make_pump(rt: FakeRoundTrip) -> Pump:
    return Pump(rt, ["a", "b", "c"], Outage("test", logging.getLogger("test")))  # type: ignore[arg-type]


def test_the_claims_of_one_round_trip_come_out_in_order_and_the_peek_once() -> None:
    rt = FakeRoundTrip(jobs={"a": [b"a1"], "c": [b"c1"]})
    pump = make_pump(rt)
    pump.pending["c"].done.append(b"old")
    claim = pump.claim(["b", "c"], 10, peek=["a"])
    assert len(rt.requests) == 1 and rt.requests[0].outcomes["c"].done == [b"old"]
    assert claim.queue == "b" and len(claim) == 0
    assert pump.take_peeked() == "a" and pump.take_peeked() is None
    assert pump.has_ahead  # c's claim is in hand: no new request before it is out
    second = pump.claim(["a"], 10)
    assert second.queue == "c" and second.reply.ids == [b"c1"]
    assert len(rt.requests) == 1 and not pump.has_ahead


def test_a_lost_reply_takes_back_the_outcomes_and_hands_back_every_lease_next() -> None:
    rt = FakeRoundTrip()
    pump = make_pump(rt)
    pump.pending["a"].done.append(b"ran")
    pump.claim_ahead(["a", "b"], 10, peek=[])
    assert not pump.has_pending  # they went with the round
    rt.fail_reads = True
    with pytest.raises(redis.ConnectionError):
        pump.claim([], 10)
    assert not pump.has_ahead and pump.pending["a"].done == [b"ran"]
    rt.fail_reads = False
    pump.claim(["a"], 10)
    # the lost round's claims may have run: the next request hands back every lease
    assert rt.requests[-1].release_all and rt.requests[-1].outcomes["a"].done == [b"ran"]
    pump.claim(["a"], 10)
    assert not rt.requests[-1].release_all  # once


def test_a_stopping_worker_hands_back_every_claim_in_flight_or_in_hand() -> None:
    rt = FakeRoundTrip(jobs={"a": [b"a1", b"a2"], "b": [b"b1"], "c": [b"c1"]})
    pump = make_pump(rt)
    assert pump.claim(["a", "b"], 10).queue == "a"  # b's claim is in hand, unstarted
    pump.claim_ahead(["c"], 10)  # c's is in flight (the worker would not, but flush must)
    pump.flush(0.1)
    handed_back: Any = rt.requests[-1].outcomes
    assert handed_back["b"].unstarted == [b"b1"]
    assert handed_back["c"].unstarted == [b"c1"]
    assert handed_back["a"].unstarted == []  # a's batch was handed out: the worker's
    assert not pump.has_ahead
