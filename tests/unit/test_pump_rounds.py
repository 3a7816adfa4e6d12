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

from fastq.connection.faults import Outage
from fastq.protocol.outcomes import Outcomes
from fastq.worker.pump import RTT_WEIGHT, SLOW_REPLY_S, Pump


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
    written_at: float = 0.0
    epoch: int = 0
    refused: list[tuple[str, Outcomes]] = field(default_factory=list)

    def replied(self) -> bool:
        return self.rt.now >= self.written_at + self.rt.latency_s

    def wait_replied(self, timeout_s: float) -> bool:
        return self.rt.now + timeout_s >= self.written_at + self.rt.latency_s

    def result(self) -> list[FakeClaim]:
        self.rt.now = max(self.rt.now, self.written_at + self.rt.latency_s)  # waits for it
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
    now: float = 0.0  # the pump's clock (see the clock fixture)
    latency_s: float = 0.0  # from a request written to its reply there to read
    epoch: int = 0  # what the requests carry: raised as a request is given up on

    def give_up(self, recorded: int = 0) -> None:
        self.epoch = max(self.epoch, recorded) + 1

    def request(
        self,
        outcomes: dict[str, Outcomes],
        claims: Sequence[str] = (),
        n: int = 0,
        *,
        release_all: bool = False,
        peek: Sequence[str] = (),
    ) -> FakeRequest:
        self.requests.append(
            FakeRequest(outcomes, claims, peek, release_all, self, None, self.now, self.epoch)
        )
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
    # the lost round's claims may have run: the next request hands back every lease,
    # and carries a newer epoch, so that Redis refuses the lost one if it lands later
    assert rt.requests[-1].release_all and rt.requests[-1].outcomes["a"].done == [b"ran"]
    assert [r.epoch for r in rt.requests] == [0, 1]
    pump.claim(["a"], 10)
    assert not rt.requests[-1].release_all  # once
    assert rt.requests[-1].epoch == 1  # raised once per request given up on


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


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> FakeRoundTrip:
    """A round trip whose clock is the pump's."""
    fake = FakeRoundTrip(jobs={"a": [b"a1"] * 1000})
    monkeypatch.setattr("fastq.worker.pump.time.monotonic", lambda: fake.now)
    return fake


def test_a_reply_read_as_soon_as_written_times_the_round_trip(rt: FakeRoundTrip) -> None:
    pump = make_pump(rt)
    assert pump.rtt_s == 0.0  # not measured yet
    rt.latency_s = 0.004
    pump.claim(["a"], 1)
    assert pump.rtt_s == pytest.approx(0.004)
    rt.latency_s = 0.002
    pump.claim(["a"], 1)
    assert pump.rtt_s == pytest.approx(0.004 + RTT_WEIGHT * (0.002 - 0.004))  # moving


def test_a_reply_written_ahead_times_the_round_trip_only_if_the_worker_waited_for_it(
    rt: FakeRoundTrip,
) -> None:
    pump = make_pump(rt)
    rt.latency_s = 0.001
    pump.claim(["a"], 1)
    assert pump.rtt_s == pytest.approx(0.001)
    # the batch ran 5 ms while a reply that took 1 ms waited: not a 5 ms round trip
    pump.claim_ahead(["a"], 1)
    rt.now += 0.005
    pump.claim([], 1)
    assert pump.rtt_s == pytest.approx(0.001)
    # the batch ran 1 ms, the reply came 3 ms after the write: the worker waited 2 ms
    rt.latency_s = 0.003
    pump.claim_ahead(["a"], 1)
    rt.now += 0.001
    pump.claim([], 1)
    assert pump.rtt_s == pytest.approx(0.001 + RTT_WEIGHT * (0.003 - 0.001))


def test_a_reply_written_ahead_that_came_sooner_lowers_the_estimate(rt: FakeRoundTrip) -> None:
    pump = make_pump(rt)
    rt.latency_s = 0.010
    pump.claim(["a"], 1)
    rt.latency_s = 0.0001
    pump.claim_ahead(["a"], 1)
    rt.now += 0.002  # the batch ran 2 ms: the round trip took at most that
    pump.claim([], 1)
    assert pump.rtt_s == pytest.approx(0.010 + RTT_WEIGHT * (0.002 - 0.010))


def test_a_lost_reply_leaves_the_estimate_alone(rt: FakeRoundTrip) -> None:
    pump = make_pump(rt)
    rt.latency_s = 0.001
    pump.claim(["a"], 1)
    rt.fail_reads, rt.latency_s = True, 0.5
    with pytest.raises(redis.ConnectionError):
        pump.claim(["a"], 1)
    assert pump.rtt_s == pytest.approx(0.001)


def test_what_the_worker_holds_is_its_claims_its_unsent_outcomes_and_its_refused_acks() -> None:
    rt = FakeRoundTrip(jobs={"a": [b"a1", b"a2"]})
    pump = make_pump(rt)
    assert pump.held() == {}
    pump.claim(["a"], 10)
    pump.pending["a"].done.append(b"a1")  # ran, its ack not sent yet
    assert pump.held() == {"a": [b"a1", b"a2"]}
    pump.pending["a"].done.append(b"a2")
    pump.claim_ahead(["a"], 10)  # their acks written, not answered yet: still held
    assert pump.held() == {"a": [b"a1", b"a2"]}
    ahead = rt.requests[-1]
    ahead.refused.append(("a", ahead.outcomes["a"]))  # Redis no longer held them
    assert len(pump.claim(["a"], 10)) == 0
    assert pump.held() == {"a": [b"a1", b"a2"]}  # a refused ack is said once
    assert pump.held() == {}


def test_a_reply_late_by_more_than_a_moment_is_said_at_once_and_its_end_once(
    rt: FakeRoundTrip, caplog: pytest.LogCaptureFixture
) -> None:
    pump = make_pump(rt)
    rt.latency_s = SLOW_REPLY_S / 2  # slow, not late: nothing said
    with caplog.at_level(logging.WARNING, logger="test"):
        pump.claim(["a"], 1)
        assert caplog.messages == []
        rt.latency_s = SLOW_REPLY_S * 10  # a reply this late: said before it comes
        pump.claim(["a"], 1)
    assert len(caplog.messages) == 2, caplog.messages
    assert "Redis unavailable: no reply for 2 s" in caplog.messages[0]
    assert "Redis back after" in caplog.messages[1]
