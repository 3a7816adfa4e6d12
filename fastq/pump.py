"""A worker's pump over its round trip: it owns what is pending (the outcomes of
jobs that ran, the jobs to hand back) and what is in flight (a claim written whose
reply is not read yet), so the rules that keep a job from being lost live in one
place:

- after every request written, its outcomes belong to it: new ones start afresh;
- a request whose reply is lost gives its outcomes back, to be sent again (acks
  are idempotent), and the next request hands back every lease the worker still
  holds, since a claim it never saw may have taken some;
- claims written ahead (a prefetch, or a round of one claim per queue) are read,
  in order, before anything else is written; when one cannot be read, none of the
  later ones can: their outcomes are taken back too.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Optional

from fastq.batch import Claim, Outcomes, Request, RoundTrip
from fastq.redis_faults import REDIS_ERRORS, Outage

log = logging.getLogger("fastq.worker")

NO_OUTCOMES: dict[str, Outcomes] = {}  # the claims of a round after its first carry none

# A reply this late means Redis stalled (a big fork, a slow disk): said in the log.
SLOW_REPLY_S = 2.0


class Pump:
    """Sends a worker's outcomes and claims through one :class:`RoundTrip`."""

    def __init__(self, round_trip: RoundTrip, queues: list[str], outage: Outage) -> None:
        self.rt = round_trip
        self.queues = queues
        self.outage = outage
        self.pending: dict[str, Outcomes] = {q: Outcomes() for q in queues}
        self._ahead: deque[Request] = deque()  # claims written, their replies not read yet
        self._release_all = False  # a reply was lost: hand back leases never seen

    @property
    def has_pending(self) -> bool:
        return any(self.pending.values())

    @property
    def has_ahead(self) -> bool:
        """A claim is in flight: the next ``claim()`` reads it."""
        return bool(self._ahead)

    def claim(self, queues: Sequence[str], n: int) -> Claim:
        """The next claim: the next one written ahead if there is one (of whatever
        it asked for), else the pending outcomes and a claim of ``n`` jobs of each
        of ``queues`` in one round trip, the first of which is returned (the
        others are read by the next calls, in order).

        Raises:
            a Redis error: nothing is lost; call again once Redis is back.
        """
        if not self._ahead:
            self._write_round(queues, n)
        request = self._ahead.popleft()
        try:
            claim = self._read(request)
        except BaseException:
            self._drop_ahead()  # their replies come on the connection just dropped
            raise
        assert claim is not None
        return claim

    def claim_ahead(self, queues: Sequence[str], n: int) -> None:
        """Write the pending outcomes and the next claims (``n`` jobs of each of
        ``queues``) now, to be read by the next ``claim()`` calls, so Redis works
        while this batch runs."""
        with contextlib.suppress(*REDIS_ERRORS):  # the next claim() writes afresh
            self._write_round(queues, n)

    def _write_round(self, queues: Sequence[str], n: int) -> None:
        """One claim request per queue, sent in one write (one round trip): the
        first carries the pending outcomes, the others a claim alone. When the write
        fails, all of them are dropped and their outcomes taken back."""
        try:
            with self.rt.one_write():
                self._ahead.append(self._write((queues[0], n)))
                for queue in queues[1:]:
                    self._ahead.append(self.rt.request(NO_OUTCOMES, (queue, n)))
        except BaseException:
            self._drop_ahead()
            self._release_all = True  # part of it may have gone out
            raise

    def _drop_ahead(self) -> None:
        """Take back the outcomes of requests whose replies will never be read, and
        hand back every lease at the next request (their claims may have run)."""
        if self._ahead:
            self.rt.discard_replies()  # a script error leaves the connection up
        while self._ahead:
            for queue, earlier in self._ahead.pop().outcomes.items():
                self.pending[queue].merge(earlier)
            self._release_all = True

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
            raise
        self.pending = {q: Outcomes() for q in self.queues}
        # once: a later request of the same round must not hand back what this one claims
        self._release_all = False
        return request

    def _read(self, request: Request) -> Optional[Claim]:
        asked = time.monotonic()
        try:
            claim = request.result()
        except BaseException:
            for queue, earlier in request.outcomes.items():
                self.pending[queue].merge(earlier)
            self._release_all = True
            raise
        waited_s = time.monotonic() - asked
        if waited_s > SLOW_REPLY_S:
            log.warning("%s: Redis took %.1f s to answer", self.outage.who, waited_s)
        self.outage.recovered()
        return claim

    def flush(self, patience_s: float) -> None:
        """Settle everything before exiting: the claim in flight goes back unstarted
        (in order, to the front), the outcomes are sent, and every lease still held is
        handed back. While Redis is away it keeps trying for ``patience_s`` only, so
        that a stop is prompt: what it still holds then comes back to the queue when
        its lease expires."""
        deadline = time.monotonic() + patience_s
        try:
            while self._ahead:
                claim = self._read(self._ahead.popleft())
                if claim is not None:
                    self.pending[claim.queue].unstarted.extend(claim.reply.ids)
        except REDIS_ERRORS:
            self._drop_ahead()
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
