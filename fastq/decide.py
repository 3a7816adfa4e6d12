"""What a worker does after a claim came back empty: a pure decision, unit-tested
on its own.

Queues are served in strict priority of their ``-q`` order (as RQ does, and
Sidekiq's strict mode): a job of a queue runs only when every queue before it was
just seen empty. After a batch from ``queues[k]``, the next round trip claims
``queues[0..k]`` at once, one claim call per queue, read in order (a round,
:meth:`EmptyClaims.next_round`): the earlier queues are checked again at every
batch boundary, and the queue that had work is claimed in the same round trip
(prefetched while the batch runs, when batches are quick), so work that sits in a
later queue costs no extra round trips, only an empty claim call per earlier queue.
When an earlier queue has work again, its batch runs first; a batch a later queue's
claim took in the same round runs after it (a batch is never handed back for
priority), and the next round claims only up to the earlier queue.

An empty claim outside such a round moves on to the next queue, one round trip
each. Once every queue came back empty in a row, the worker stops (stopping, or a
burst worker with nothing due within its horizon) or sleeps until a wake-up, at
most until the earliest due time any of the claims reported.

A paused queue's claim takes nothing whatever waits in it: for this decision it is
an empty queue whose due times do not count (they cannot run until a resume, and
the resume pushes a wake-up). A burst worker stops rather than wait for a resume.
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

    def got_jobs(self, index: int = 0) -> None:
        """A batch came from ``queues[index]``: start again from the first queue,
        and let the next round reach down to the first queue that had work."""
        self._restart()
        if self.work_at < 0 or index < self.work_at:
            self.work_at = index

    def next_round(self) -> range:
        """The queues (indexes, in order) to claim in the next round trip: after a
        batch, every queue up to the first one that gave work since the last round
        (all read in order, the earlier queues first); otherwise the next queue of
        the sweep alone."""
        if self.work_at < 0:
            return range(self.index, self.index + 1)
        upto, self.work_at = self.work_at, -1
        return range(upto + 1)

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
        of another queue is left over from a round that already gave a batch: it
        does not count (the next round claims that queue again)."""
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
