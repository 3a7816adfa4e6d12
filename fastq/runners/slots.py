"""The worker loop's seam to how its jobs run: slots, jobs handed over, outcomes
collected.

The loop asks its slots how many jobs to claim now (at most the free ones, never
more), hands each claimed batch over, and collects the outcomes of the jobs that
finished since into the next round trip, which settles them and claims more. A
sync runner is the case of one slot that runs a batch to completion inside the
hand-over (:class:`RunToCompletion`: nothing is ever in flight, and the loop runs
the batch itself); a runner with N slots (:class:`fastq.runners.aio.AsyncRunner`) takes
the jobs it runs in flight and hands back those the loop runs to completion;
so does a pool of N threads for sync jobs (:class:`fastq.runners.threads.ThreadRunner`);
both on one base (:class:`fastq.runners.inflight_base.FlightRunner`).
An app of both kinds run both ways gets both runners behind one
(:class:`fastq.runners.mixed.Mixed`).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol

from fastq.job import Runnable
from fastq.protocol.outcomes import Outcomes

# Once some slots are free, wait this long at most for more to free before
# claiming: one round trip then settles many jobs.
ACK_LINGER_S = 0.002
# The longest wait between two looks at the worker's stop flag.
WAIT_TICK_S = 0.1


class JobSlots(Protocol):
    """What a worker loop asks of the jobs it does not run to completion itself."""

    # False: a batch written ahead may take more jobs than there are free slots
    may_claim_ahead: bool
    # True: its event loop stamps the master's slot (the heartbeat thread does not)
    beats_itself: bool

    @property
    def in_flight(self) -> int:
        """Jobs handed over that have not finished."""

    def start(self) -> None:
        """After the fork: start what runs the jobs."""

    def claim_n(self, sized_n: int, stopping: Callable[[], bool]) -> int:
        """How many jobs to claim now (``sized_n``: the batch sizer's figure); may
        wait until enough slots are free. 0 only once ``stopping()``."""

    def launch(
        self, runnable: list[Runnable], out: Outcomes, queue_index: int, queue: str
    ) -> list[Runnable]:
        """Take the jobs it runs in flight (``out``: where the outcomes of those
        that cannot start go); returns the rest, which the loop runs to completion."""

    def collect(self, pending: dict[str, Outcomes]) -> int:
        """Move the outcomes of the jobs finished since into ``pending`` (by queue);
        returns how many finished."""

    def measured(self) -> tuple[float, int]:
        """The run time and count of the jobs finished since, for the batch sizer
        (0, 0: none measured; only a runner that claims what the sizer says)."""

    def wait_finished(self, timeout_s: float, stopping: Callable[[], bool]) -> None:
        """Wait until a job in flight finishes, ``timeout_s`` passes, or ``stopping()``."""

    def drain(self, pending: dict[str, Outcomes]) -> int:
        """A graceful stop: wait for every job in flight (a HardStop cuts it short),
        collecting their outcomes; returns how many finished."""

    def close(self, pending: dict[str, Outcomes]) -> int:
        """Cancel what is still in flight (interrupted: handed back, no stall
        counted), collect every outcome, stop; returns how many finished."""

    def take_waiting(self, after_s: float) -> dict[str, list[bytes]]:
        """From another thread: take the jobs that have waited ``after_s`` for a
        free slot (by queue); they will not run here (the caller hands them back)."""

    @property
    def watch(self) -> Optional[Callable[[], None]]:
        """Called from the heartbeat thread at every beat: says so when the jobs'
        loop is stuck."""


class RunToCompletion:
    """One slot: the loop runs each batch to completion (the sync runner)."""

    may_claim_ahead = True
    beats_itself = False
    in_flight = 0

    def start(self) -> None:
        pass

    def claim_n(self, sized_n: int, stopping: Callable[[], bool]) -> int:
        return sized_n

    def launch(
        self, runnable: list[Runnable], out: Outcomes, queue_index: int, queue: str
    ) -> list[Runnable]:
        return runnable

    def collect(self, pending: dict[str, Outcomes]) -> int:
        return 0

    def measured(self) -> tuple[float, int]:
        return 0.0, 0  # the loop measures the batches it runs

    def wait_finished(self, timeout_s: float, stopping: Callable[[], bool]) -> None:
        pass

    def drain(self, pending: dict[str, Outcomes]) -> int:
        return 0

    def close(self, pending: dict[str, Outcomes]) -> int:
        return 0

    def take_waiting(self, after_s: float) -> dict[str, list[bytes]]:
        return {}  # the loop's own batch: fastq.worker.mates cuts it

    watch: Optional[Callable[[], None]] = None


def wait_for_free(
    cond: threading.Condition,
    free: Callable[[], int],
    enough: int,
    stopping: Callable[[], bool],
) -> int:
    """With ``cond`` held: wait until ``enough`` slots are free, or some are and
    ACK_LINGER_S passed since, or all are; returns how many (0 only once
    ``stopping()``). Runners notify ``cond`` as their jobs end."""
    linger_until = 0.0
    while True:
        n = free()
        if n >= enough:
            return n
        if stopping():
            return 0
        now = time.monotonic()
        if n:
            if not linger_until:
                linger_until = now + ACK_LINGER_S
            elif now >= linger_until:
                return n
            cond.wait(linger_until - now)
        else:
            cond.wait(WAIT_TICK_S)
