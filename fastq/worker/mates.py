"""A long job's batch-mates go back to the queue.

A worker claims jobs in batches and runs a batch's sync jobs one after another, so
the jobs behind one that runs long (a socket read with no timeout, a sleep: calls
that release the GIL, which ``--child-timeout`` does not see) wait for it, claimed
and leased, while other workers sit idle. :class:`LongJobWatch`, a thread of the
worker's that looks whatever the worker's thread does: once
the job in hand has run ``after_s``, the jobs cut from behind it in its batch, and
those of a claim written ahead, go back to the front of their queue, unstarted
(nothing counted), for other workers. The job itself runs on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Optional

from fastq.connection.faults import REDIS_ERRORS
from fastq.context import BatchCursor
from fastq.runners.slots import JobSlots
from fastq.runners.sync import SyncRunner
from fastq.worker.pump import Pump

log = logging.getLogger("fastq.worker")


class LongJobWatch(threading.Thread):
    """Hands back the jobs waiting behind a job in hand that ran ``after_s``. A
    thread of its own: a hand-back waits on Redis, and the lease keeper must not."""

    def __init__(
        self, runner: SyncRunner, slots: JobSlots, pump: Pump, worker_id: str, after_s: float
    ) -> None:
        super().__init__(name="fastq-long-jobs", daemon=True)
        self._stop_event = threading.Event()
        self.runner = runner
        self.slots = slots
        self.pump = pump
        self.worker_id = worker_id
        self.after_s = after_s
        self._seen: Optional[tuple[BatchCursor, int]] = None  # the job in hand last tick
        self._since = 0.0
        self._handed_back: Optional[tuple[BatchCursor, int]] = None

    @property
    def tick_s(self) -> float:
        """How often to look: a job is caught within a quarter of ``after_s`` late."""
        return self.after_s / 4

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(self.tick_s):
            # what was not sent goes with the loop's next request
            with contextlib.suppress(*REDIS_ERRORS):
                self.tick()

    def tick(self) -> None:
        """One look (the thread's, every ``tick_s``)."""
        waiting = self.slots.take_waiting(self.after_s)  # for a free thread, that long
        if waiting:
            moved = self.pump.hand_back_waiting(waiting)
            log.info(
                "worker %s: %d jobs waited %g s for a free thread; back to the queue "
                "for other workers",
                self.worker_id,
                moved,
                self.after_s,
            )
        cursor = self.runner.cursor
        index = -1 if cursor is None else cursor.index
        now = time.monotonic()
        if cursor is None or index < 0:
            self._seen = None
            return
        seen = (cursor, index)
        if self._seen is None or self._seen[0] is not cursor or self._seen[1] != index:
            self._seen, self._since = seen, now
            return
        if now - self._since < self.after_s or self._handed_back == seen:
            return
        self._handed_back = seen
        # what is cut will not run here, even if the job ends meanwhile
        rest = self.runner.hand_back_rest(cursor, index)
        moved = self.pump.hand_back_waiting({cursor.queue: [job[0] for job in rest]})
        if moved:
            job_id, target = cursor.runnable[index][0], cursor.runnable[index][1]
            log.info(
                "worker %s: job %s (%s) has run %.0f s; %d jobs waiting behind it go "
                "back to the queue for other workers",
                self.worker_id,
                job_id.decode(),
                target.name,
                now - self._since,
                moved,
            )
