"""How many jobs a worker claims at once: enough for about ``target_batch_s`` of
work, measured from its jobs' durations, at most ``max_n``.

Quick jobs move in big batches; slow ones in small batches shared out among the
children. The first claim is of one job and the size doubles batch by batch up to
that mark, so a blast of jobs of an unknown kind is measured before many are held.
"""

from __future__ import annotations

# Prefetch the next batch while running this one only when a batch is this quick:
# it hides the round trip, and slow jobs are better shared out among siblings.
PREFETCH_MAX_BATCH_S = 0.02
# Idle this long, a worker sizes its next batches afresh (see forget).
FORGET_AFTER_IDLE_S = 0.5


class BatchSizer:
    """The size of the next claim, from the durations of the jobs run so far."""

    __slots__ = ("max_n", "target_batch_s", "n", "job_s")

    def __init__(self, max_n: int, target_batch_s: float) -> None:
        self.max_n = max_n
        self.target_batch_s = target_batch_s
        self.n = 1  # doubles, up to what job durations allow
        self.job_s = 0.0  # a moving average; 0: not measured

    def ran(self, batch_s: float, jobs: int) -> None:
        """A batch of ``jobs`` took ``batch_s``: size the next one to hold about
        target_batch_s of work, and at most double the last."""
        job_s = batch_s / jobs
        self.job_s = job_s if self.job_s == 0.0 else 0.7 * self.job_s + 0.3 * job_s
        wanted = int(self.target_batch_s / max(self.job_s, 1e-7))
        self.n = max(1, min(self.max_n, wanted, self.n * 2))

    def prefetch_pays(self) -> bool:
        """Is a batch quick enough to claim the next one while it runs?"""
        return bool(self.job_s) and self.job_s * self.n < PREFETCH_MAX_BATCH_S

    def forget(self, idle_s: float) -> None:
        """After a long idle spell, the next jobs may be of another kind (an SMTP
        blast after CPU-bound ones): measure them afresh from a claim of one job.
        Not after a short one: a stream with gaps would then claim one job at a
        time while more wait."""
        if idle_s >= FORGET_AFTER_IDLE_S:
            self.n = 1
            self.job_s = 0.0
