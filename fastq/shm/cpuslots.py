"""CPU slots: at most N children of a pool run CPU-bound batches at once.

Thirty-two children busy with quick, CPU-bound jobs on a 2-core host only
time-slice each other (and Redis, if it is local): a child that measures its
batches as CPU-bound takes a slot before claiming more, and the others wait
without claiming. Children whose jobs mostly wait (SMTP, HTTP) never take one.

A slot is an ``fcntl`` lock on one byte of a file the master made before
forking: the kernel drops it when its holder dies, so a SIGKILLed child can
never leak a slot.

A child that has not measured its jobs (new, or back from idle) goes by the
pool's latest verdict, one byte of shared memory: after an SMTP blast wakes 32
children, the first batch tells the other 31 not to queue for a slot one after
another.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import random
import tempfile
import time
from typing import Callable, Optional


class CpuSlots:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"cpu slots must be >= 1, not {slots}")
        self.slots = slots
        # open for the pool's lifetime, inherited by the children
        self._file = tempfile.TemporaryFile()  # noqa: SIM115
        self.held: Optional[int] = None
        # anonymous and shared: the children forked after this see one byte
        self._verdict = mmap.mmap(-1, 1)

    def note_verdict(self, cpu_bound: bool) -> None:
        """Tell the pool whether the batch this child just ran was CPU-bound."""
        self._verdict[0] = 2 if cpu_bound else 1

    def last_verdict(self) -> Optional[bool]:
        """Was the latest batch run in the pool CPU-bound? None: none ran yet."""
        verdict = self._verdict[0]
        return None if verdict == 0 else verdict == 2

    def try_acquire(self) -> bool:
        """Take a free slot if there is one."""
        if self.held is not None:
            return True
        for slot in random.sample(range(self.slots), self.slots):
            try:
                fcntl.lockf(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                continue
            self.held = slot
            return True
        return False

    def acquire(self) -> None:
        """Take a slot, waiting for one if all are taken. A signal handler that
        raises interrupts the wait."""
        if not self.try_acquire():
            slot = random.randrange(self.slots)
            fcntl.lockf(self._file, fcntl.LOCK_EX, 1, slot)
            self.held = slot

    def release(self) -> None:
        if self.held is not None:
            fcntl.lockf(self._file, fcntl.LOCK_UN, 1, self.held)
            self.held = None


class BatchProfile:
    """Tells whether a batch was CPU-bound: more time computing than blocked.

    Time blocked = wall − CPU − time runnable but waiting for a CPU, from
    ``/proc/thread-self/schedstat`` (Linux), so that a crowded host — where every
    process waits its turn — does not make CPU-bound jobs look like waiting
    ones. Without schedstat, the CPU/wall ratio (which crowding does skew).
    Open it in the thread whose batches it measures.
    """

    def __init__(self) -> None:
        try:
            self._fd: Optional[int] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        self._start = (0.0, 0, 0)

    def _sched_ns(self) -> tuple[int, int]:
        # CPU from the thread clock: schedstat's own CPU figure of a running task
        # lags until the next tick, which would make short batches look idle
        if self._fd is None:
            return time.thread_time_ns(), 0
        return time.thread_time_ns(), int(os.pread(self._fd, 128, 0).split()[1])

    def start(self) -> None:
        self._start = (time.perf_counter(), *self._sched_ns())

    def cpu_bound(self) -> bool:
        wall0, cpu0, runqueue0 = self._start
        cpu, runqueue = self._sched_ns()
        cpu_ns = cpu - cpu0
        blocked_ns = (time.perf_counter() - wall0) * 1e9 - cpu_ns - (runqueue - runqueue0)
        return cpu_ns > blocked_ns

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# A batch shorter than this tells its siblings nothing: timing noise decides whether
# a few microseconds of work look CPU-bound (one in a few hundred do not).
SHARED_VERDICT_MIN_S = 0.001


class CpuGovernor:
    """One worker's use of its pool's CPU slots: holds a slot while its batches are
    CPU-bound, lets it go otherwise, and waits for one (holding no jobs) when its
    jobs are CPU-bound and every slot is taken.

    Whether the last batch was mostly CPU is None while not measured (new, or back
    from idle, see ``forget``): then the worker goes by its siblings' latest verdict,
    and without one counts as CPU-bound, so that the idle children one blast wakes
    do not all claim at once. Without slots (a lone worker) it measures nothing.
    """

    def __init__(self, slots: Optional[CpuSlots]) -> None:
        self.slots = slots
        self.cpu_bound: Optional[bool] = None
        self._profile: Optional[BatchProfile] = None

    def open(self) -> None:
        """In the thread that runs the batches, after any fork."""
        if self.slots is not None:
            self._profile = BatchProfile()

    def close(self) -> None:
        if self._profile is not None:
            self._profile.close()

    def before_claim(
        self, settle: Callable[[], None], wait: Callable[[Callable[[], None]], object]
    ) -> None:
        """Take or let go of a slot before claiming. Before waiting for one,
        ``settle()`` sends what ran, so its jobs are not held meanwhile; ``wait(f)``
        blocks in ``f`` in a way a stop signal ends."""
        slots = self.slots
        if slots is None:
            return
        cpu_bound = self.cpu_bound
        if cpu_bound is None:
            cpu_bound = slots.last_verdict()
        if cpu_bound is False:
            slots.release()
            return
        if slots.try_acquire():
            return
        settle()
        wait(slots.acquire)

    def batch_started(self) -> None:
        if self._profile is not None:
            self._profile.start()

    def batch_ran(self, batch_s: float) -> None:
        """Note whether the batch that ran for ``batch_s`` was CPU-bound, and tell
        the siblings when it ran long enough to say."""
        if self._profile is None or self.slots is None:
            return
        self.cpu_bound = self._profile.cpu_bound()
        if batch_s >= SHARED_VERDICT_MIN_S:
            self.slots.note_verdict(self.cpu_bound)

    def idle(self) -> None:
        """Nothing to claim: let the slot go, and measure the next jobs afresh
        (they may be of another kind)."""
        if self.slots is not None:
            self.slots.release()

    def forget(self) -> None:
        self.cpu_bound = None
