"""The runners of one worker, built in one place from its options.

Every worker has a sync runner (:class:`fastq.runners.sync.SyncRunner`): it runs in
the worker's thread what the loop runs to completion, and its rate-key gate, hooks
and metrics serve the other runners too. What else runs jobs follows from the app
and two options: ``async def`` jobs (or ``concurrency`` > 1) bring an event loop
(:class:`fastq.runners.aio.AsyncRunner`), ``threads`` a pool of threads for sync
jobs (:class:`fastq.runners.threads.ThreadRunner`), both together one runner of
both (:class:`fastq.runners.mixed.Mixed`); neither leaves the loop running each
batch to completion (:class:`fastq.runners.slots.RunToCompletion`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from fastq.context import ProgressBuffer
from fastq.hooks import Hooks, job_logger, jobs_log
from fastq.runners.slots import JobSlots, RunToCompletion
from fastq.runners.sync import Stoppable, SyncRunner
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.shm.metrics import ChildMetrics

if TYPE_CHECKING:
    from fastq.job import JobDef

__all__ = ["Runners", "build_runners"]


class Runners(NamedTuple):
    """A worker's runners: ``sync`` runs what the loop runs itself; ``slots`` say
    how many jobs to claim and take those they run in flight."""

    sync: SyncRunner
    slots: JobSlots


def build_runners(
    owner: Stoppable,
    worker_id: Callable[[], str],
    jobs: Iterable[JobDef[Any]],
    hooks: Hooks,
    *,
    slot: Optional[HeartbeatSlot],
    progress: Optional[ProgressBuffer],
    metrics: Optional[ChildMetrics],
    concurrency: int,
    threads: int,
    max_claim: int,
    on_stuck: Optional[Callable[[], None]] = None,
) -> Runners:
    """The runners of a worker (built before a fork: they start in ``slots.start()``).

    Args:
        owner: the worker: its ``stopping`` ends a batch run to completion.
        worker_id: named in the log (known only after the fork).
        jobs: the app's job definitions: any ``async def`` one brings an event loop.
        hooks: the app's (with the per-job log line added while ``fastq.jobs`` logs
            at DEBUG).
        slot: the master's heartbeat slot (its in-flight records name the jobs held).
        progress: where the jobs' progress reports go.
        metrics: where jobs are counted for a pool's /metrics (None: not counted).
        concurrency: ``async def`` jobs in flight at most.
        threads: sync jobs run in this many threads (0: in the worker's thread).
        max_claim: the most jobs claimed in one round trip.
        on_stuck: called once a job in a thread ran past its timeout.

    Raises:
        ValueError: ``concurrency`` < 1 or ``threads`` < 0.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, not {concurrency}")
    if threads < 0:
        raise ValueError(f"threads must be >= 0, not {threads}")
    if jobs_log.isEnabledFor(logging.DEBUG):  # per-job lines: only then a hook
        hooks = hooks.with_last_after(job_logger)
    sync = SyncRunner(owner, slot, progress, hooks)
    sync.metrics = metrics
    slots: JobSlots = RunToCompletion()
    loop = None
    if concurrency > 1 or any(job.is_async for job in jobs):
        from fastq.runners.aio import AsyncRunner  # asyncio only for workers that use it

        loop = AsyncRunner(worker_id, sync, slot, progress, concurrency, max_claim)
        slots = loop
    if threads:
        from fastq.runners.mixed import Mixed
        from fastq.runners.threads import ThreadRunner

        pool = ThreadRunner(
            worker_id,
            sync,
            slot,
            progress,
            threads,
            max_claim,
            record_base=0 if loop is None else concurrency,
            cond=None if loop is None else loop.cond,
            on_stuck=on_stuck,
        )
        slots = pool if loop is None else Mixed(loop, pool, max_claim)
    return Runners(sync, slots)
