"""A worker's pump over its round trip: it owns what is pending (the outcomes of
jobs that ran, the jobs to hand back) and what is in flight (a request of claims
written whose replies are not read yet, and claims read but not handed out yet), so
the rules that keep a job from being lost live in one place:

- after every request written, its outcomes belong to it: new ones start afresh;
- a request whose reply is lost gives its outcomes back, to be sent again (acks
  are idempotent), and the next request hands back every lease the worker still
  holds, since a claim it never saw may have taken some;
- a request written ahead (a prefetch) is read before anything else is written,
  and every claim it brought is handed out (or handed back) before the next;
- the hand-back of taken at-most-once jobs that never started goes out once only;
- the master's heartbeat slot hears which finished jobs' acks were answered (its
  ring of finished jobs), so that a kill re-runs none of them.

It also times its round trips (``rtt_s``, a moving estimate, what Redis and the
network take from a request written to its reply read) for the batch sizer: a
reply read at once after its request was written, or one written ahead that had
not come back when the worker wanted it, took the time from write to read; one
written ahead that was already there says only that the round trip was shorter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable, Optional

import redis

from fastq.connection.faults import REDIS_ERRORS, Outage
from fastq.protocol.outcomes import Outcomes
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.worker.roundtrip import Claim, Request, RoundTrip, StaleEpoch

log = logging.getLogger("fastq.worker")

# Fault injection for the tests: with this probability, a round trip's write SIGKILLs
# its own process just before or just after it goes out (its finished jobs noted,
# their acks not seen answered): what a crash between a job's end and its ack does.
_KILL_AT_WRITE = float(os.environ.get("FASTQ_TEST_KILL_AT_WRITE") or 0)

# A reply this late means Redis stalled (a big fork, a slow disk) or is out of reach:
# said in the log then (one line: the outage's), and again when Redis answers.
SLOW_REPLY_S = 2.0
# The weight of the latest round trip in the moving estimate.
RTT_WEIGHT = 0.3
# Refused acks kept for ``Pump.held`` at most.
REFUSED_KEPT = 64


class Pump:
    """Sends a worker's outcomes and claims through one :class:`RoundTrip`."""

    def __init__(
        self,
        round_trip: RoundTrip,
        queues: list[str],
        outage: Outage,
        slot: Optional[HeartbeatSlot] = None,
        on_acked: Optional[Callable[[str, Any], None]] = None,
        settle_keys: Optional[Callable[[str, Outcomes], None]] = None,
    ) -> None:
        self.rt = round_trip
        # told (queue, ack reply) when an ack left something to do: App.after_ack
        self.on_acked = on_acked
        # before a request: what its outcomes say of keys (Outcomes.rests, the
        # circuits' outcomes), told to the worker's gates (Worker._settle_keys)
        self.settle_keys = settle_keys
        self.queues = queues
        self.outage = outage
        self.slot = slot  # its ring of finished jobs hears which acks were answered
        self.pending: dict[str, Outcomes] = {q: Outcomes() for q in queues}
        self._ahead: Optional[Request] = None  # written, its replies not read yet
        self._claims: deque[Claim] = deque()  # read, not handed out yet (in order)
        self._peeked: Optional[str] = None  # what the last peek found, not taken yet
        self._release_all = False  # a reply was lost: hand back leases never seen
        self.rtt_s = 0.0  # a moving estimate of the round trip; 0: not measured
        # taken for every round trip: the long-job watch's thread hands back the jobs
        # waiting behind a long one (hand_back_waiting) while the loop runs it
        self.lock = threading.Lock()
        # what a hand-back from that thread could not send: it goes with the next request
        self._unsent_outcomes: dict[str, Outcomes] = {}
        # what the worker holds, for a log line (see ``held``): the claims of the last
        # reply read, and the outcomes whose ack Redis refused since ``held`` was read
        self.last_claims: list[Claim] = []
        self.refused: deque[tuple[str, Outcomes]] = deque(maxlen=REFUSED_KEPT)

    @property
    def has_pending(self) -> bool:
        return any(self.pending.values()) or bool(self._unsent_outcomes)

    @property
    def has_ahead(self) -> bool:
        """A claim is in flight or in hand: the next ``claim()`` returns it."""
        return self._ahead is not None or bool(self._claims)

    def claim(self, queues: Sequence[str], n: int, peek: Sequence[str] = ()) -> Optional[Claim]:
        """The next claim: the next one in flight or in hand if there is one (of
        whatever it asked for), else the pending outcomes, a peek at ``peek`` and a
        claim of ``n`` jobs of each of ``queues`` in one round trip, the first of
        which is returned (the others by the next calls, in order). None: asked
        for none (a claim ahead was expected), and there is none: it was handed
        back meanwhile (``hand_back_waiting``); ask again.

        Raises:
            a Redis error: nothing is lost; call again once Redis is back.
        """
        with self.lock:
            if not self._claims:
                if self._ahead is not None:
                    request, self._ahead = self._ahead, None
                else:
                    request = self._write(queues, n, peek)
                self._claims.extend(self._read(request))
                self._peeked = request.peeked
            return self._claims.popleft() if self._claims else None

    def claim_ahead(self, queues: Sequence[str], n: int, peek: Sequence[str] = ()) -> None:
        """Write the pending outcomes, a peek at ``peek`` and the next claims (``n``
        jobs of each of ``queues``) now, to be read by the next ``claim()``, so
        Redis works while this batch runs."""
        with self.lock, contextlib.suppress(*REDIS_ERRORS):  # the next claim() writes afresh
            self._ahead = self._write(queues, n, peek)

    def hand_back_waiting(self, rest: dict[str, list[bytes]]) -> int:
        """From the long-job watch's thread (fastq.worker.mates), while the loop
        runs a long job: hand back ``rest`` (the jobs cut from its batch, by queue)
        and the jobs of a claim written ahead (its reply read here), unstarted, and
        settle what finished before the long job, at once. What Redis does not take
        goes with the loop's next request. Returns how many jobs went back."""
        with self.lock:
            if self._ahead is not None:
                request, self._ahead = self._ahead, None
                with contextlib.suppress(*REDIS_ERRORS):  # its jobs come back with the leases
                    self._claims.extend(self._read(request))
            finished = 0 if self.slot is None else self.slot.finished_count
            # the outcomes so far: the runner, in the loop's thread, appends the long
            # job's to what stays pending
            now = {queue: out.split_off() for queue, out in self.pending.items()}
            back = 0
            for queue, ids in rest.items():
                now[queue].unstarted.extend(ids)
                back += len(ids)
            while self._claims:
                claim = self._claims.popleft()
                now[claim.queue].unstarted.extend(claim.reply.ids)
                back += len(claim)
            if not any(now.values()):
                return 0
            self._settle_keys(now)
            try:
                request = self.rt.request({q: out for q, out in now.items() if out})
            except REDIS_ERRORS:
                self._gave_up()  # part of it may have gone out
                for queue, out in now.items():
                    self._unsent_outcomes.setdefault(queue, Outcomes()).extend(out)
                return back
            request.finished = finished
            with contextlib.suppress(*REDIS_ERRORS):  # a lost reply gives them back to pending
                self._read(request)
            return back

    def held(self) -> dict[str, list[bytes]]:
        """The jobs this worker holds in Redis as far as it knows, by queue: those of
        its last claims, those whose outcomes are not acknowledged yet, and those
        whose ack Redis refused since the last call. Read from another thread (the
        lease keeper's) for a log line: a best effort, never in the way of the loop."""
        held: dict[str, list[bytes]] = {}
        try:
            ahead = self._ahead
            sent = [] if ahead is None else list(ahead.outcomes.items())
            for claim in self.last_claims:
                held.setdefault(claim.queue, []).extend(claim.reply.ids)
            for queue, out in [*self.pending.items(), *sent]:
                held.setdefault(queue, []).extend(_ids(out))
            while self.refused:
                queue, out = self.refused.popleft()
                held.setdefault(queue, []).extend(_ids(out))
        except (RuntimeError, IndexError):  # changed as it was read: what was read
            pass
        return {queue: list(dict.fromkeys(ids)) for queue, ids in held.items() if ids}

    def take_peeked(self) -> Optional[str]:
        """The first queue the last peek found with work to claim (once)."""
        peeked, self._peeked = self._peeked, None
        return peeked

    def settle(self) -> None:
        """Send the pending outcomes alone; on failure they stay pending."""
        if not self.has_pending:
            return
        with self.lock, contextlib.suppress(*REDIS_ERRORS):
            self._read(self._write())

    def _write(self, queues: Sequence[str] = (), n: int = 0, peek: Sequence[str] = ()) -> Request:
        # every job noted finished so far is in the pending outcomes this carries
        finished = 0 if self.slot is None else self.slot.finished_count
        if self._unsent_outcomes:  # what the long-job watch's thread could not send
            for queue, out in self._unsent_outcomes.items():
                self.pending[queue].take_back(out)
            self._unsent_outcomes = {}
        self._settle_keys(self.pending)
        if _KILL_AT_WRITE:
            _maybe_killed(before=True)
        try:
            request = self.rt.request(
                self.pending, queues, n, release_all=self._release_all, peek=peek
            )
            if _KILL_AT_WRITE:
                _maybe_killed(before=False)
        except BaseException:
            self._gave_up()  # part of it may have gone out
            for out in self.pending.values():  # and is never sent twice
                self._lose_give_backs(out)
            raise
        self.pending = {q: Outcomes() for q in self.queues}
        request.finished = finished
        return request

    def _settle_keys(self, outcomes: dict[str, Outcomes]) -> None:
        """Tell the gates what the jobs of ``outcomes`` say of their keys (rests the
        jobs asked for, the outcomes of circuits' jobs), before the request that
        settles those jobs (their retries come back after a rest)."""
        for queue, out in outcomes.items():
            if out.rests or out.circuit_outcomes:
                if self.settle_keys is not None:
                    self.settle_keys(queue, out)
                out.rests, out.circuit_outcomes = [], []

    def _read(self, request: Request) -> list[Claim]:
        came_first = request.replied()  # the reply was there before it was wanted
        try:
            if not came_first and not request.wait_replied(SLOW_REPLY_S):
                # said now, once, not when the read gives up (a lease later)
                self.outage.failed(redis.TimeoutError(f"no reply for {SLOW_REPLY_S:g} s"))
            claims = request.result()
        except BaseException as exc:
            for queue, earlier in request.outcomes.items():
                self.pending[queue].take_back(earlier)
                self._lose_give_backs(earlier)
            self._gave_up(exc.recorded if isinstance(exc, StaleEpoch) else 0)
            raise
        self.last_claims = claims
        if request.refused:
            self.refused.extend(request.refused)
        if request.release_all:
            self._release_all = False
        if self.slot is not None:  # requests are read in the order written
            self.slot.acked(request.finished)
        done = time.monotonic()
        self._timed(done - request.written_at, came_first)
        self.outage.recovered()
        if self.on_acked is not None:
            for queue, reply in request.follow_ups:
                self.on_acked(queue, reply)
        return claims

    def _gave_up(self, recorded: int = 0) -> None:
        """A request's reply is lost: it may have run, or run later. The next one
        hands back every lease this worker still holds (a claim it never saw may
        have taken some), and carries a newer epoch, so that Redis refuses what of
        this one it has not run yet (``RoundTrip.give_up``)."""
        self._release_all = True
        self.rt.give_up(recorded)

    def _timed(self, took_s: float, came_first: bool) -> None:
        """Fold a round trip into ``rtt_s``. A reply that came before it was
        wanted bounds the round trip from above only: it may lower the estimate,
        never raise it (else the time a batch ran would pass for network time)."""
        if came_first and took_s >= self.rtt_s:
            return
        self.rtt_s = (
            took_s if self.rtt_s == 0.0 else self.rtt_s + RTT_WEIGHT * (took_s - self.rtt_s)
        )

    def _lose_give_backs(self, out: Outcomes) -> None:
        """Taken at-most-once jobs whose hand-back may or may not have gone out: not
        sent again (that could run one twice), so perhaps lost; said so."""
        if out.give_back:
            log.error(
                "%s: the hand-back of %d at-most-once jobs that never started got no "
                "reply; if Redis did not take it they are lost: %s",
                self.outage.who,
                len(out.give_back),
                ", ".join(job_id.decode() for job_id, _ in out.give_back),
            )
            out.give_back = []

    def flush(self, patience_s: float) -> None:
        """Settle everything before exiting: the claims in flight or in hand go back
        unstarted (in order, to the front), the outcomes are sent, and every lease still held is
        handed back. While Redis is away it keeps trying for ``patience_s`` only, so
        that a stop is prompt: what it still holds then comes back to the queue when
        its lease expires."""
        with self.lock:
            self._flush(patience_s)

    def _flush(self, patience_s: float) -> None:
        deadline = time.monotonic() + patience_s
        if self._ahead is not None:
            request, self._ahead = self._ahead, None
            with contextlib.suppress(*REDIS_ERRORS):
                self._claims.extend(self._read(request))
        while self._claims:
            claim = self._claims.popleft()
            self.pending[claim.queue].unstarted.extend(claim.reply.ids)
        while self.rt.may_hold_leases or self.has_pending:
            self._release_all = True  # a reply lost to a signal may have left leases unseen
            try:
                self._read(self._write())
                return
            except REDIS_ERRORS as exc:
                delay = self.outage.failed(exc)
                if time.monotonic() + delay > deadline:
                    log.warning(
                        "%s: could not settle its last batch (%s); its jobs come back to "
                        "their queue when its lease expires",
                        self.outage.who,
                        exc,
                    )
                    return
                time.sleep(delay)


def _maybe_killed(before: bool) -> None:
    """``FASTQ_TEST_KILL_AT_WRITE``: SIGKILL this process, now and then."""
    if random.random() < _KILL_AT_WRITE / 2:
        log.warning(
            "fault injection: killed %s a round trip's write", "before" if before else "after"
        )
        os.kill(os.getpid(), signal.SIGKILL)


def _ids(out: Outcomes) -> list[bytes]:
    """The ids of the jobs ``out`` settles or hands back."""
    return [
        *out.done,
        *(r[0] for r in out.retry),
        *(d[0] for d in out.dead),
        *(b[0] for b in out.broken),
        *out.unstarted,
        *out.stalled,
        *out.interrupted,
    ]
