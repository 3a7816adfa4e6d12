"""What a worker does after a claim came back empty: a pure decision, unit-tested
on its own.

Queues are served in strict priority of their ``-q`` order (as RQ does, and
Sidekiq's strict mode): a job of a queue runs only when every queue before it was
just seen empty. After a batch from ``queues[k]``, the next round trip (a
:class:`Round`, :meth:`EmptyClaims.next_round`) *peeks* at ``queues[0..k-1]`` and
claims ``queues[k]`` again: a peek is a few plain reads per queue (ready or
prioritised jobs, a scheduled job already due, the paused flag), a fraction of an
empty claim call's Redis time. So work that sits in a later queue costs no extra
round trip, and the earlier queues are looked at again at every batch boundary
(with quick jobs the round goes out while the batch runs). When a peek finds work
in an earlier queue, the next round claims every queue up to ``queues[k]`` in order,
and replies are taken in that order: the earlier queue's batch runs first, a batch
the later queue's claim took in the same round runs after it (a batch is never
handed back for priority), and the round after stops at the earlier queue. So
work arriving in an earlier queue starts after at most the rest of the batch in
hand, the batch claimed ahead while it ran (quick jobs only) and the one claimed in
the round trip whose peek found it; a batch holds at most ``--batch`` jobs or,
grown past it (:mod:`fastq.worker.sizer`), 10 ms of quick work: a wait bounded by time.

An empty claim outside such a round moves on to the next queue, one round trip
each. Once every queue came back empty in a row, the worker stops (stopping, or a
burst worker with nothing due within its horizon) or sleeps until a wake-up, at
most until the earliest due time any of the claims reported.

A paused queue's claim takes nothing whatever waits in it: for this decision it is
an empty queue whose due times do not count (they cannot run until a resume, and
the resume pushes a wake-up). A burst worker stops rather than wait for a resume.

A claim the queue's rate limit throttled took nothing either, and reports when its
next token is due as its ``next_due_ms``: for this decision, a job due then (the
worker sleeps until it, and a burst worker waits for it within its horizon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class ClaimFrom:
    """Claim next from ``queues[index]``."""

    index: int


@dataclass(frozen=True)
class Stop:
    """Nothing to do and nothing to wait for: the worker exits its loop.

    ``next_due_ms``: the earliest due time (Redis' clock) of a job left scheduled,
    -1 when none is (a burst worker says what it leaves behind)."""

    next_due_ms: int = -1


@dataclass(frozen=True)
class Sleep:
    """Wait for a wake-up for at most ``seconds`` (until the next due job, or the
    idle timeout), then claim from the first queue again. ``paused``: every queue
    that has nothing due was paused (the wait is for a resume, not for work)."""

    seconds: float
    paused: bool = False


Step = Union[ClaimFrom, Stop, Sleep]


@dataclass(frozen=True)
class Round:
    """One round trip: peek at the queues ``peek`` and claim from the queues
    ``claim`` (indexes into the worker's queues, in order)."""

    claim: range
    peek: range = range(0)


@dataclass
class EmptyClaims:
    """The empty claims since the last batch, across ``n_queues`` queues."""

    n_queues: int
    index: int = 0  # the queue to claim from next
    in_a_row: int = 0
    next_due_ms: int = -1  # earliest due time reported since the last batch; -1: none
    n_paused: int = 0  # paused queues met since the last batch
    # the first queue a batch came from since the last round was planned; -1: none
    work_at: int = -1
    # the first queue a peek found work in since the last round was planned; -1: none
    peeked_at: int = -1

    def got_jobs(self, index: int = 0) -> None:
        """A batch came from ``queues[index]``: start again from the first queue,
        and let the next round reach down to the first queue that had work."""
        self._restart()
        if self.work_at < 0 or index < self.work_at:
            self.work_at = index

    def saw_work(self, index: int) -> None:
        """A peek found work in ``queues[index]``: the next round claims it."""
        if self.peeked_at < 0 or index < self.peeked_at:
            self.peeked_at = index

    def next_round(self) -> Round:
        """What the next round trip asks for. After a batch of ``queues[k]``: a peek
        at every queue before it and a claim of it, or when a peek saw work in an
        earlier queue, a claim of every queue up to ``queues[k]`` (read in order,
        the earlier first). Otherwise: the next queue of the sweep alone."""
        upto, peeked = self.work_at, self.peeked_at
        self.work_at = self.peeked_at = -1
        if upto < 0:
            return Round(claim=range(self.index, self.index + 1))
        if 0 <= peeked < upto:
            return Round(claim=range(upto + 1))
        return Round(claim=range(upto, upto + 1), peek=range(upto))

    def _restart(self) -> None:
        self.index, self.in_a_row, self.next_due_ms, self.n_paused = 0, 0, -1, 0

    def after_empty(
        self,
        now_ms: float,
        next_due_ms: int,
        *,
        burst: bool,
        stopping: bool,
        idle_timeout_s: float,
        burst_horizon_s: float = 1.0,
        paused: bool = False,
        queue_index: int = -1,
    ) -> Step:
        """The step after a claim of ``queues[index]`` came back empty at Redis time
        ``now_ms`` (to the microsecond), reporting ``next_due_ms`` (-1: nothing
        scheduled). A job is due once Redis' clock reaches its millisecond, so the
        sleep ends then; a job already due is claimed after a millisecond.

        A burst worker waits for a job due within ``burst_horizon_s``, and stops
        when nothing is (a retry a second away is waited for; a job scheduled for
        tomorrow is not).

        ``paused``: the queue is paused; ``next_due_ms`` is then ignored.

        ``queue_index``: the queue the reply is of (-1: ``queues[index]``). The reply
        of another queue does not count: it is left over from a round that already
        gave a batch, or from a round that only peeked at the queues before it;
        the sweep claims from ``queues[index]`` next."""
        if queue_index >= 0 and queue_index != self.index:
            return ClaimFrom(self.index)
        if paused:
            self.n_paused += 1
            next_due_ms = -1
        if next_due_ms >= 0 and (self.next_due_ms < 0 or next_due_ms < self.next_due_ms):
            self.next_due_ms = next_due_ms
        self.in_a_row += 1
        self.index = (self.index + 1) % self.n_queues
        if self.in_a_row < self.n_queues:
            return ClaimFrom(self.index)
        due_ms, all_paused = self.next_due_ms, self.n_paused == self.n_queues
        self._restart()  # after the stop or the sleep, a fresh sweep from the first queue
        if stopping or (burst and (due_ms < 0 or due_ms - now_ms > burst_horizon_s * 1000)):
            return Stop(due_ms)
        if due_ms < 0:
            return Sleep(idle_timeout_s, paused=all_paused)
        wait_ms = due_ms - now_ms
        return Sleep(min(idle_timeout_s, (wait_ms if wait_ms > 0 else 1) / 1000.0))
