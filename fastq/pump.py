"""A worker's pump over its round trip: it owns what is pending (the outcomes of
jobs that ran, the jobs to hand back) and what is in flight (a claim written whose
reply is not read yet), so the rules that keep a job from being lost live in one
place:

- after every request written, its outcomes belong to it: new ones start afresh;
- a request whose reply is lost gives its outcomes back, to be sent again (acks
  are idempotent), and the next request hands back every lease the worker still
  holds, since a claim it never saw may have taken some;
- a claim written ahead (a prefetch) is read before anything else is written;
- the hand-back of taken at-most-once jobs that never started goes out once only.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Optional

from fastq.batch import Claim, Outcomes, Request, RoundTrip
from fastq.redis_faults import REDIS_ERRORS, Outage

log = logging.getLogger("fastq.worker")

# A reply this late means Redis stalled (a big fork, a slow disk): said in the log.
SLOW_REPLY_S = 2.0


class Pump:
    """Sends a worker's outcomes and claims through one :class:`RoundTrip`."""

    def __init__(self, round_trip: RoundTrip, queues: list[str], outage: Outage) -> None:
        self.rt = round_trip
        self.queues = queues
        self.outage = outage
        self.pending: dict[str, Outcomes] = {q: Outcomes() for q in queues}
        self._ahead: Optional[Request] = None  # a claim written, its reply not read yet
        self._release_all = False  # a reply was lost: hand back leases never seen

    @property
    def has_pending(self) -> bool:
        return any(self.pending.values())

    @property
    def has_ahead(self) -> bool:
        """A claim is in flight: the next ``claim()`` reads it."""
        return self._ahead is not None

    def claim(self, queue: str, n: int) -> Claim:
        """The next claim: the one written ahead if there is one (of whatever it
        asked for), else the pending outcomes and a claim of ``n`` jobs of ``queue``
        in one round trip.

        Raises:
            a Redis error: nothing is lost; call again once Redis is back.
        """
        if self._ahead is not None:
            request, self._ahead = self._ahead, None
        else:
            request = self._write((queue, n))
        claim = self._read(request)
        assert claim is not None
        return claim

    def claim_ahead(self, queue: str, n: int) -> None:
        """Write the pending outcomes and the next claim now, to be read by the
        next ``claim()``, so Redis works while this batch runs."""
        with contextlib.suppress(*REDIS_ERRORS):  # the next claim() writes afresh
            self._ahead = self._write((queue, n))

    def settle(self) -> None:
        """Send the pending outcomes alone; on failure they stay pending."""
        if not self.has_pending:
            return
        with contextlib.suppress(*REDIS_ERRORS):
            self._read(self._write(None))

    def _write(self, claim: Optional[tuple[str, int]]) -> Request:
        try:
            request = self.rt.request(self.pending, claim, release_all=self._release_all)
        except BaseException:
            self._release_all = True  # part of it may have gone out
            for out in self.pending.values():  # and is never sent twice
                self._lose_give_backs(out)
            raise
        self.pending = {q: Outcomes() for q in self.queues}
        return request

    def _read(self, request: Request) -> Optional[Claim]:
        asked = time.monotonic()
        try:
            claim = request.result()
        except BaseException:
            for queue, earlier in request.outcomes.items():
                self.pending[queue].merge(earlier)
                self._lose_give_backs(earlier)
            self._release_all = True
            raise
        if request.release_all:
            self._release_all = False
        waited_s = time.monotonic() - asked
        if waited_s > SLOW_REPLY_S:
            log.warning("%s: Redis took %.1f s to answer", self.outage.who, waited_s)
        self.outage.recovered()
        return claim

    def _lose_give_backs(self, out: Outcomes) -> None:
        """Taken at-most-once jobs whose hand-back may or may not have gone out: not
        sent again (that could run one twice), so perhaps lost; said so."""
        if out.give_back:
            log.error(
                "%s: the hand-back of %d at-most-once jobs that never started got no "
                "reply; if Redis did not take it they are lost: %s",
                self.outage.who, len(out.give_back),
                ", ".join(job_id.decode() for job_id, _ in out.give_back),
            )  # fmt: skip
            out.give_back = []

    def flush(self, patience_s: float) -> None:
        """Settle everything before exiting: the claim in flight goes back unstarted
        (in order, to the front), the outcomes are sent, and every lease still held is
        handed back. While Redis is away it keeps trying for ``patience_s`` only, so
        that a stop is prompt: what it still holds then comes back to the queue when
        its lease expires."""
        deadline = time.monotonic() + patience_s
        if self._ahead is not None:
            request, self._ahead = self._ahead, None
            with contextlib.suppress(*REDIS_ERRORS):
                claim = self._read(request)
                if claim is not None:
                    self.pending[claim.queue].unstarted.extend(claim.reply.ids)
        while self.rt.may_hold_leases or self.has_pending:
            self._release_all = True  # a reply lost to a signal may have left leases unseen
            try:
                self._read(self._write(None))
                return
            except REDIS_ERRORS as exc:
                delay = self.outage.failed(exc)
                if time.monotonic() + delay > deadline:
                    log.warning(
                        "%s: could not settle its last batch (%s); its jobs come back to "
                        "their queue when its lease expires",
                        self.outage.who, exc,
                    )  # fmt: skip
                    return
                time.sleep(delay)
