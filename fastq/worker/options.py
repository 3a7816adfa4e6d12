"""How a worker claims and runs jobs, declared once: ``fastq worker`` and ``fastq pool``
build a :class:`WorkerOptions` from their command line, a pool's
:class:`fastq.pool.master.PoolConfig` holds one for its children, and
:class:`fastq.worker.worker.Worker` takes one."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Optional

from fastq.validate import check_delay_s

MAX_BATCH = 1000
# hand_back_after_s's default: long next to a batch of the quick jobs batching is
# for (a batch holds target_batch_s = 0.1 s of work), short next to what the jobs
# behind a long one would otherwise wait
HAND_BACK_AFTER_S = 2.0


@dataclass(frozen=True)
class OldName:
    """An option's old name, still taken with a warning: as a keyword (``Worker``,
    :meth:`WorkerOptions.with_changes`) and as a flag (``fastq worker``, ``fastq pool``)."""

    old: str
    new: str
    meaning: str  # what the option sets, as the warnings say it

    @property
    def flag(self) -> str:
        return "--" + self.old.replace("_", "-")

    @property
    def keyword_warning(self) -> str:
        return f"{self.old}= is deprecated: it is {self.new}= ({self.meaning})"

    def flag_warning(self, then: str = "") -> str:
        new_flag = "--" + self.new.replace("_", "-")
        return f"{self.flag} is deprecated: it sets the {self.meaning}, use {new_flag}{then}"


# --concurrency (concurrency=) was --async-jobs until a Celery user read it as
# processes: it keeps its meaning for a while, with a warning, rather than change it
# silently (a `--concurrency 200` would then fork 200 processes)
OLD_NAMES = (OldName("concurrency", "async_jobs", "async def jobs in flight per worker process"),)


@dataclass(frozen=True)
class WorkerOptions:
    """A worker's options, checked when made (``ValueError`` names the bad one).

    Attributes:
        batch_size: the most jobs claimed per round trip (1 to 1000). The batch
            adapts below it so that one holds about ``target_batch_s`` of work;
            on a worker of one queue, a batch of quick jobs grows past it (up to
            10 times, at most 1,000 jobs and 10 ms of work) to cover the measured
            round trip to Redis.
        lease_s: how long a claimed job stays leased; a heartbeat thread extends
            the leases of held jobs every third of it.
        idle_timeout_s: longest single wait for a wake-up when idle.
        target_batch_s: the work a batch holds (at most a quarter of a lease).
        burst: return once every queue is empty and nothing is due within
            ``burst_horizon_s``; what is left scheduled is logged (how many, the
            earliest due time).
        burst_horizon_s: how far ahead a burst worker waits for a scheduled job
            (a retry in backoff, a delayed job) before it exits (default 1 s).
        redis_patience_s: give up (raise ``RedisGaveUp``) once Redis has been
            unavailable this long; None: burst workers wait 30 s, long-running
            ones forever.
        async_jobs: ``async def`` jobs in flight at most (on an event loop of the
            worker's, :mod:`fastq.runners.aio`; ``--async-jobs``). Without ``threads``,
            sync jobs run one at a time in the worker's thread whatever it is (a sync
            job blocks the claims meanwhile, not the async jobs in flight). A worker
            of an app without async jobs and one async job at most runs no event loop.
        threads: run sync jobs in this many threads (:mod:`fastq.runners.threads`), as
            many in flight; 0 (the default): one at a time in the worker's thread. A
            job past its ``timeout_s`` in a thread is settled as timed out, and the
            worker then stops claiming, finishes the others and exits (recycled: a
            thread cannot be killed).
        hand_back_after_s: once a sync job has run this long, the jobs claimed
            with it that wait behind it go back to the queue for other workers
            (:mod:`fastq.worker.mates`); 0: never.
        max_jobs: stop after about this many jobs (recycling).
        max_memory_bytes: stop when the process' RSS exceeds this (recycling).
        unknown_job_grace_s: how long a job of a name the app does not register
            goes back to its queue before it is broken (:mod:`fastq.worker.unknown`);
            None: the app's ``unknown_job_grace_s``.
    """

    batch_size: int = 100
    lease_s: float = 60.0
    idle_timeout_s: float = 5.0
    target_batch_s: float = 0.1
    burst: bool = False
    burst_horizon_s: float = 1.0
    redis_patience_s: Optional[float] = None
    async_jobs: int = 1
    threads: int = 0
    hand_back_after_s: float = HAND_BACK_AFTER_S
    max_jobs: Optional[int] = None
    max_memory_bytes: Optional[int] = None
    unknown_job_grace_s: Optional[float] = None

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ValueError(f"batch size must be within 1..{MAX_BATCH}, not {self.batch_size}")
        if self.lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, not {self.lease_s}")
        horizon = self.burst_horizon_s
        if not (isinstance(horizon, (int, float)) and 0 <= horizon < float("inf")):
            raise ValueError(f"burst_horizon_s must be a finite number >= 0, not {horizon!r}")
        if self.async_jobs < 1:
            raise ValueError(f"async_jobs must be >= 1, not {self.async_jobs}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, not {self.threads}")
        after = self.hand_back_after_s
        if not (isinstance(after, (int, float)) and 0 <= after < float("inf")):
            raise ValueError(f"hand_back_after_s must be a finite number >= 0, not {after!r}")
        if self.unknown_job_grace_s is not None:
            check_delay_s(self.unknown_job_grace_s, "unknown_job_grace_s")

    @property
    def patience_s(self) -> Optional[float]:
        """``redis_patience_s``, or its default: 30 s for a burst worker, else None."""
        if self.redis_patience_s is None and self.burst:
            return 30.0
        return self.redis_patience_s

    def with_changes(self, **changes: Any) -> WorkerOptions:
        """A copy with ``changes`` (option names as keywords), checked as made.
        An old name (:data:`OLD_NAMES`: ``concurrency``, for ``async_jobs``) is
        taken with a DeprecationWarning.

        Raises:
            TypeError: a keyword that names no option.
        """
        for name in OLD_NAMES:
            if name.old in changes:
                warnings.warn(name.keyword_warning, DeprecationWarning, stacklevel=3)
                changes.setdefault(name.new, changes.pop(name.old))
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"unknown worker option {unknown[0]!r}")
        return dataclasses.replace(self, **changes) if changes else self
