"""How many jobs a worker claims at once: enough for about ``target_batch_s`` of
work, measured from its jobs' durations, at most ``max_n``.

Quick jobs move in big batches; slow ones in small batches shared out among the
children. The first claim is of one job and the size doubles batch by batch up to
that mark, so a blast of jobs of an unknown kind is measured before many are held.

A Redis far away (docs/internals.md): while a quick batch runs, the next claim is in flight (see
``prefetch_pays``); a batch that ends before that claim comes back leaves the worker
waiting on the network. So a quick batch also holds enough work to cover the
measured round trip, past ``max_n`` if need be, up to ``COVER_MAX_N`` jobs and
``COVER_MAX_BATCH_S`` of work: only quick batches grow, slow jobs are still shared
out among siblings.

On a worker of several queues too: strict priority is kept at batch boundaries
(:mod:`fastq.worker.decide`), so work arriving in an earlier queue waits for at most the
batch in hand and two claimed after it (one without a claim written ahead), and
a batch holds at most ``max_n`` jobs or, grown, ``COVER_MAX_BATCH_S`` of quick work:
that wait is bounded by time, not by ``max_n``. Each queue has a sizer of its own
(:class:`QueueSizers`): a batch is sized from its own queue's jobs, so 1,000-job
batches grown on quick jobs of one queue never become the first claim of another
queue whose jobs are slow (one child would hold them while its siblings idle).
"""

from __future__ import annotations

# Prefetch the next batch while running this one only when a batch is this quick:
# it hides the round trip, and slow jobs are better shared out among siblings.
PREFETCH_MAX_BATCH_S = 0.02
# Idle this long, a worker sizes its next batches afresh (see forget).
FORGET_AFTER_IDLE_S = 0.5
# A batch grown to cover a round trip holds at most this many jobs (one claim and
# one ack call of this many cost Redis about 2-3 ms: see bench/script_cost.py) ...
COVER_MAX_N = 1000
# ... at most this many times max_n, and at most this much work.
COVER_MAX_FACTOR = 10
COVER_MAX_BATCH_S = 0.01
# How many round trips a grown batch covers: its jobs' run time leaves out the
# batch's decoding and bookkeeping, and a round trip's time varies.
COVER_ROUND_TRIPS = 2.0


class BatchSizer:
    """The size of the next claim, from the durations of the jobs run so far."""

    __slots__ = ("max_n", "cover_max_n", "target_batch_s", "n", "job_s")

    def __init__(self, max_n: int, target_batch_s: float) -> None:
        self.max_n = max_n
        self.cover_max_n = max(max_n, min(COVER_MAX_N, COVER_MAX_FACTOR * max_n))
        self.target_batch_s = target_batch_s
        self.n = 1  # doubles, up to what job durations allow
        self.job_s = 0.0  # a moving average; 0: not measured

    def ran(self, batch_s: float, jobs: int, rtt_s: float = 0.0) -> None:
        """A batch of ``jobs`` took ``batch_s``: size the next one to hold about
        target_batch_s of work (within max_n), or for quick jobs enough to cover a
        round trip of ``rtt_s`` (0: not measured; within cover_max_n), and at most
        double the last."""
        job_s = batch_s / jobs
        self.job_s = job_s if self.job_s == 0.0 else 0.7 * self.job_s + 0.3 * job_s
        per_job = max(self.job_s, 1e-7)
        wanted = min(self.max_n, int(self.target_batch_s / per_job))
        if rtt_s > 0.0:
            cover = int(COVER_ROUND_TRIPS * rtt_s / per_job) + 1
            quick = int(min(COVER_MAX_BATCH_S, self.target_batch_s) / per_job)
            wanted = max(wanted, min(cover, quick, self.cover_max_n))
        self.n = max(1, min(wanted, self.n * 2))

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


class QueueSizers:
    """A worker's batch sizers, one per queue."""

    __slots__ = ("by_queue",)

    def __init__(self, queues: list[str], max_n: int, target_batch_s: float) -> None:
        self.by_queue = {queue: BatchSizer(max_n, target_batch_s) for queue in queues}

    def __getitem__(self, queue: str) -> BatchSizer:
        return self.by_queue[queue]

    def n(self, queues: list[str]) -> int:
        """The size of a claim of each of ``queues`` in one round trip: the smallest
        of theirs (several are claimed at once only when work came in an earlier one)."""
        by_queue = self.by_queue
        return min(by_queue[queue].n for queue in queues) if queues else 0

    def alias(self, name: str, queue: str) -> None:
        """Size claims of ``name`` (a shard of ``queue``) with ``queue``'s sizer: the
        shards of a queue hold jobs of the same kinds."""
        self.by_queue[name] = self.by_queue[queue]

    def forget(self, idle_s: float) -> None:
        for sizer in {id(sizer): sizer for sizer in self.by_queue.values()}.values():
            sizer.forget(idle_s)
