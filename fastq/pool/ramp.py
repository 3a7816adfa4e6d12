"""How a pool starts its workers: a first wave, then the rest once they are of use.

A forked worker costs some 10 ms of CPU before its first job (copy-on-write faults,
its connection and threads). Thirty of them forked on 2 cores while the first
workers drain a blast queued before the start slow that drain about threefold, and
quick jobs gain nothing from more processes than cores. So a cold pool forks one
worker per CPU first, and the rest as soon as one of these says more would pay:

- it waits for work: its queues are empty, nothing is slowed by the forks;
- it has run one job for ``slow_job_s`` and sleeps in it: jobs that wait on I/O
  want every child (a job merely preempted on a busy machine is runnable, not
  asleep; CPU-bound jobs gain nothing from more children than cores);
- or ``patience_s`` after the first wave at the latest: the pool is whole by then.

Only a pool's start ramps up: a respawn, a TTIN or a HUP forks at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Callable, Optional

import psutil

from fastq.shm.heartbeat import HeartbeatSlot

RAMP_PATIENCE_S = 1.0
RAMP_SLOW_JOB_S = 0.002  # far above a quick job's run, below one that waits on I/O
RAMP_POLL_S = 0.005  # how often the master looks at the first wave meanwhile


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def asleep(pid: int) -> bool:
    """Is the process (its main thread, which runs the jobs) asleep, not runnable?"""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_SLEEPING
    except psutil.Error:
        return False


class StartRamp:
    """How many workers a starting pool wants now (see the module's docstring)."""

    def __init__(
        self,
        first_wave: int,
        patience_s: float = RAMP_PATIENCE_S,
        slow_job_s: float = RAMP_SLOW_JOB_S,
        asleep: Callable[[int], bool] = asleep,
    ) -> None:
        if first_wave < 1:
            raise ValueError(f"first_wave must be >= 1, not {first_wave}")
        self.first_wave = first_wave
        self.patience_s = patience_s
        self.slow_job_s = slow_job_s
        self.asleep = asleep
        self.started_at: Optional[float] = None  # when the first wave was wanted
        self.done = False
        self.reason = ""  # why the ramp is done, for the log

    def wanted(self, total: int, workers: Iterable[tuple[int, HeartbeatSlot]], now: float) -> int:
        """Of ``total`` workers, how many to have by ``now``, given the pids and
        heartbeat slots of the workers up."""
        if self.done:
            return total
        if self.started_at is None:
            self.started_at = now
        if total <= self.first_wave:
            self.done, self.reason = True, "no second wave"
        elif now - self.started_at >= self.patience_s:
            self.done, self.reason = True, f"{self.patience_s:g} s after the first"
        else:
            for pid, slot in workers:
                reason = self.more_would_pay(pid, slot, now)
                if reason:
                    self.done, self.reason = True, reason
                    break
        return total if self.done else self.first_wave

    def more_would_pay(self, pid: int, slot: HeartbeatSlot, now: float) -> str:
        """Why more workers would pay, from one worker; "" if they would not."""
        if slot.waiting:
            return "a worker waits for work"
        running = slot.running()
        if running is not None and now - running[2] >= self.slow_job_s and self.asleep(pid):
            return "a worker sleeps in a job"
        return ""
