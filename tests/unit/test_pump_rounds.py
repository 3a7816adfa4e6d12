"""The pump's rounds of claims (one claim request per queue, one write): what each
request carries, and that nothing is lost when a round's replies cannot be read."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
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
    claim: Optional[tuple[str, int]]
    release_all: bool
    rt: FakeRoundTrip

    def result(self) -> Optional[FakeClaim]:
        if self.rt.fail_reads:
            raise redis.ConnectionError("lost")
        if self.claim is None:
            return None
        queue = self.claim[0]
        return FakeClaim(queue, FakeReply(self.rt.jobs.get(queue, [])))


@dataclass
class FakeRoundTrip:
    jobs: dict[str, list[bytes]] = field(default_factory=dict)
    fail_reads: bool = False
    writes: list[list[FakeRequest]] = field(default_factory=list)
    discarded: int = 0
    may_hold_leases: bool = False
    _open: Optional[list[FakeRequest]] = None

    def request(
        self, outcomes: dict[str, Outcomes], claim: Any = None, *, release_all: bool = False
    ) -> FakeRequest:
        req = FakeRequest(outcomes, claim, release_all, self)
        if self._open is not None:
            self._open.append(req)
        else:
            self.writes.append([req])
        return req

    @contextlib.contextmanager
    def one_write(self) -> Iterator[None]:
        self._open = []
        yield
        self.writes.append(self._open)
        self._open = None

    def discard_replies(self) -> None:
        self.discarded += 1


def make_pump(rt: FakeRoundTrip) -> Pump:
    return Pump(rt, ["a", "b", "c"], Outage("test", logging.getLogger("test")))  # type: ignore[arg-type]


def test_a_round_goes_out_in_one_write_and_only_its_first_claim_carries_outcomes() -> None:
    rt = FakeRoundTrip(jobs={"c": [b"j1"]})
    pump = make_pump(rt)
    pump.pending["c"].done.append(b"old")
    pump._release_all = True  # a reply was lost earlier
    claim = pump.claim(["a", "b", "c"], 10)
    assert [len(w) for w in rt.writes] == [3]
    first, second, third = rt.writes[0]
    assert first.outcomes["c"].done == [b"old"] and first.release_all
    # a later claim of the round must not hand back what the first one leases
    assert not second.release_all and not third.release_all
    assert second.outcomes == third.outcomes == {}
    assert claim.queue == "a" and len(claim) == 0
    assert pump.has_ahead
    assert pump.claim([], 10).queue == "b"
    last = pump.claim([], 10)
    assert last.queue == "c" and last.reply.ids == [b"j1"]
    assert not pump.has_ahead and len(rt.writes) == 1  # read, never written again


def test_a_lost_reply_takes_back_the_outcomes_of_every_request_of_the_round() -> None:
    rt = FakeRoundTrip()
    pump = make_pump(rt)
    pump.pending["a"].done.append(b"ran")
    pump.claim_ahead(["a", "b", "c"], 10)
    assert not pump.has_pending  # they went with the round
    rt.fail_reads = True
    with pytest.raises(redis.ConnectionError):
        pump.claim([], 10)
    assert not pump.has_ahead  # the later replies will never be read
    assert rt.discarded == 1  # nor read by a later request as its own
    assert pump.pending["a"].done == [b"ran"]
    rt.fail_reads = False
    pump.claim(["a"], 10)
    # the next request hands back every lease: the lost round's claims may have run
    assert rt.writes[-1][0].release_all and rt.writes[-1][0].outcomes["a"].done == [b"ran"]


def test_a_stopping_worker_hands_back_every_claim_of_the_round_in_flight() -> None:
    rt = FakeRoundTrip(jobs={"a": [b"a1", b"a2"], "c": [b"c1"]})
    pump = make_pump(rt)
    pump.claim_ahead(["a", "b", "c"], 10)
    pump.flush(0.1)
    handed_back = rt.writes[-1][0].outcomes
    assert handed_back["a"].unstarted == [b"a1", b"a2"]
    assert handed_back["c"].unstarted == [b"c1"]
    assert not pump.has_ahead
