"""Async jobs and sync jobs in threads in one child: both runners behind one."""

from __future__ import annotations

import time
from typing import Callable, Optional

from fastq.job import Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.runners.aio import AsyncRunner
from fastq.runners.slots import WAIT_TICK_S, wait_for_free
from fastq.runners.threads import ThreadRunner


class Mixed:
    """An app with ``async def`` jobs and sync jobs in threads: async jobs go to
    the event loop, sync ones to the threads. Both runners share one condition,
    which the worker's thread waits on; a claim takes at most their free slots
    together (a batch of one kind past its runner's free slots waits its turn there,
    so the jobs held never outnumber both runners' slots).

    Args:
        loop: the async runner (:class:`fastq.runners.aio.AsyncRunner`).
        threads: the thread runner (:class:`fastq.runners.threads.ThreadRunner`), built
            with the async runner's condition.
        max_claim: the most jobs claimed in one round trip.
    """

    may_claim_ahead = False
    beats_itself = True  # the event loop's

    def __init__(self, loop: AsyncRunner, threads: ThreadRunner, max_claim: int) -> None:
        self.loop = loop
        self.threads = threads
        self._cond = loop.cond
        self.max_claim = max_claim
        self.enough = max(1, min(max_claim, loop.concurrency + threads.threads) // 4)

    @property
    def in_flight(self) -> int:
        return self.loop.in_flight + self.threads.in_flight

    @property
    def watch(self) -> Optional[Callable[[], None]]:
        return self.loop.watch

    def start(self) -> None:
        self.loop.start()
        self.threads.start()

    def claim_n(self, sized_n: int, stopping: Callable[[], bool]) -> int:
        with self._cond:
            free = wait_for_free(self._cond, self._free, self.enough, stopping)
        return min(self.max_claim, free)

    def _free(self) -> int:
        """Free slots of both together: a batch of one kind may take some of the
        other's (its jobs wait their turn), never more than both hold in all."""
        loop, threads = self.loop, self.threads
        slots = loop.concurrency + threads.threads - threads.stuck
        return max(0, slots - loop.in_flight - threads.in_flight)

    def launch(
        self, runnable: list[Runnable], out: Outcomes, queue_index: int, queue: str
    ) -> list[Runnable]:
        return self.threads.launch(
            self.loop.launch(runnable, out, queue_index, queue), out, queue_index, queue
        )

    def take_waiting(self, after_s: float) -> dict[str, list[bytes]]:
        return self.threads.take_waiting(after_s)

    def collect(self, pending: dict[str, Outcomes]) -> int:
        return self.loop.collect(pending) + self.threads.collect(pending)

    def measured(self) -> tuple[float, int]:
        return 0.0, 0

    def wait_finished(self, timeout_s: float, stopping: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.in_flight and not stopping():
                if self.loop.finished_n or self.threads.finished_n:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(min(left, WAIT_TICK_S))

    def drain(self, pending: dict[str, Outcomes]) -> int:
        return self.loop.drain(pending) + self.threads.drain(pending)

    def close(self, pending: dict[str, Outcomes]) -> int:
        return self.loop.close(pending) + self.threads.close(pending)
