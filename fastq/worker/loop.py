"""The claim loop of one worker: one round trip settles what finished and claims the
next batch, which runs while the round trip after it may already be on its way.

The loop is assembled from parts, each in a module of its own: the pump
(:mod:`fastq.worker.pump`) owns what is pending and what is in flight on the round trip;
the batch sizer (:mod:`fastq.worker.sizer`) says how many jobs to claim; the CPU governor
(:class:`fastq.shm.cpuslots.CpuGovernor`) takes a pool's CPU slot while batches are
CPU-bound; a pure decision (:mod:`fastq.worker.decide`) says what follows an empty claim;
a runner (:mod:`fastq.runners.sync`) runs the jobs; job slots (:mod:`fastq.runners.slots`)
say how many to claim and keep jobs in flight (:mod:`fastq.runners.aio`: ``async def``
jobs, up to ``async_jobs`` at once; :mod:`fastq.runners.threads`: sync jobs in
``threads`` threads) while the loop claims and settles.

The worker (:mod:`fastq.worker.worker`) builds the parts, opens them after the fork,
handles the signals and closes everything; the loop only turns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import psutil

from fastq.connection.faults import REDIS_ERRORS
from fastq.job import Runnable
from fastq.protocol.listing import first_due_ms, scheduled_count
from fastq.runners.slots import JobSlots
from fastq.runners.sync import HardStop, SyncRunner
from fastq.shm.cpuslots import CpuGovernor
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.worker.atmostonce import AtMostOnce, Taken
from fastq.worker.decide import ClaimFrom, EmptyClaims, Round, Sleep, Stop
from fastq.worker.options import WorkerOptions
from fastq.worker.pump import Pump
from fastq.worker.queues import QueueLayout
from fastq.worker.roundtrip import Claim, RoundTrip
from fastq.worker.sizer import QueueSizers
from fastq.worker.unknown import DEFAULT_UNKNOWN_JOB_GRACE_S, UnknownJobs

if TYPE_CHECKING:
    from fastq.job import JobDef

log = logging.getLogger("fastq.worker")

# A stopping worker tries this long to settle what it holds while Redis is away;
# what is left then comes back to the queue when its lease expires.
FLUSH_PATIENCE_S = 1.5
# With jobs in flight and the queues empty, a worker looks for new work this often.
BUSY_POLL_S = 0.1
# The batches a worker remembers of the jobs it claimed (RoundTrip.batch_of), per
# queue: an ack pops those it carries; the rest (handed back, failed) are forgotten
# past this many. One it forgot is looked up by its ack, as an HTTP worker's are.
BATCH_OF_MAX = 50_000


class Flags(Protocol):
    """What the loop reads of its worker at every turn, and sets to stop it: plain
    attributes, which the worker's signal handlers set (and its runner reads
    ``stopping`` before each job)."""

    stopping: bool
    quiet: bool


class ClaimLoop:
    """Turns until its worker stops (or, a burst worker, runs out of work); what it
    carries from one turn to the next is its attributes.

    Args:
        flags: its worker's ``stopping`` and ``quiet``.
        wait_interruptibly: blocks in a wait that a stop signal cuts short (then
            the worker is stopping and it returns False).
        wait_for_redis: backs off after a Redis fault (or raises ``RedisGaveUp``).
        The others: the parts the worker built and opened.
    """

    def __init__(
        self,
        flags: Flags,
        options: WorkerOptions,
        *,
        worker_id: str,
        layout: QueueLayout,
        sizers: QueueSizers,
        governor: CpuGovernor,
        slots: JobSlots,
        runner: SyncRunner,
        rt: RoundTrip,
        pump: Pump,
        at_most_once: Optional[AtMostOnce],
        registry: dict[str, JobDef[Any]],
        slot: Optional[HeartbeatSlot],
        wait_interruptibly: Callable[[Callable[[], object]], bool],
        wait_for_redis: Callable[[BaseException], None],
        unknown: Optional[UnknownJobs] = None,
    ) -> None:
        self.flags = flags
        self.options = options
        self.worker_id = worker_id
        self.layout = layout
        self.sizers = sizers
        self.governor = governor
        self.slots = slots
        self.runner = runner
        self.rt = rt
        self.pump = pump
        self.at_most_once = at_most_once
        self.registry = registry
        self.slot = slot
        self.wait_interruptibly = wait_interruptibly
        self.wait_for_redis = wait_for_redis
        self.unknown = unknown or UnknownJobs(DEFAULT_UNKNOWN_JOB_GRACE_S, worker_id)
        self.jobs_run = 0
        # which queue to claim from, after which empty claims
        self.empty = EmptyClaims(len(layout.logical))
        # empty claims of a sharded queue followed by a claim of the shard a peek saw
        # work in, since its last batch
        self.chased = 0
        self.was_paused = False  # say so once when every queue is paused, not at every wake-up
        # queues whose last claim said they have a rate limit (the first claim tells)
        self.rate_limited: set[str] = set()
        self.sized_queue = layout.logical[0]  # whose jobs the slots measure (one slot)

    # -- the turns -------------------------------------------------------------

    def run(self) -> None:
        """Turn until the worker stops, or a burst worker finds nothing left to do."""
        flags = self.flags
        while not flags.stopping:
            if flags.quiet:
                self.idle_quietly()
                continue
            claim = self.claim()
            if claim is None:
                continue  # stopping, or Redis is away (waited for)
            queue_index, more_here = self.read_peeks(claim)
            if len(claim):
                self.run_claimed(claim, queue_index)
            elif not self.after_empty(claim, queue_index, more_here):
                return

    def claim(self) -> Optional[Claim]:
        """This turn's round trip: the outcomes settled since go out with a claim of
        the next round's queues (or with none: a claim in flight or in hand asked for
        its own). None: the worker is stopping, or Redis is away (waited for)."""
        pump = self.pump
        claim_q: list[str] = []  # nothing to write: a claim is in flight or in hand
        peek_q: list[str] = []
        n = 0  # a claim in flight or in hand asked for its own
        if not pump.has_ahead:
            claim_q, peek_q = self.names(self.empty.next_round())
            # at most the free slots: may wait for enough of them to free
            n = self.slots.claim_n(self.sizers.n(claim_q), self.is_stopping)
            self.governor.before_claim(pump.settle, self.wait_interruptibly)
            if self.flags.stopping:
                return None
        self.jobs_run += self.collect()  # goes out with this claim
        try:
            return pump.claim(claim_q, n, peek=peek_q)
        except REDIS_ERRORS as exc:
            self.wait_for_redis(exc)
            return None

    def read_peeks(self, claim: Claim) -> tuple[int, bool]:
        """Take note of what a claim's reply says beyond its jobs: whether its queue
        is rate limited, and which queue a peek found work in. Returns the claimed
        queue's index, and whether another shard of that queue has work."""
        if claim.reply.rate_limited:
            self.rate_limited.add(claim.queue)
        else:
            self.rate_limited.discard(claim.queue)
        layout = self.layout
        queue_index = layout.index_of[claim.queue]
        peeked = self.pump.take_peeked()
        more_here = False
        if peeked is not None:
            layout.found_work(peeked)  # a sharded queue claims that shard next
            peeked_index = layout.index_of[peeked]
            if peeked_index == queue_index:
                more_here = True
            else:
                self.empty.saw_work(peeked_index)
        return queue_index, more_here

    def run_claimed(self, claim: Claim, queue_index: int) -> None:
        """Run a claimed batch, with the next claim already on its way if that pays."""
        self.was_paused = False
        self.chased = 0
        self.empty.got_jobs(queue_index)
        batch = self.open_batch(claim)
        # strict priority: a peek at every queue before this one, and this one;
        # never ahead on a rate-limited queue: tokens are for jobs that start now
        pump, sizers = self.pump, self.sizers
        if (
            sizers[claim.queue].prefetch_pays()
            and not pump.has_ahead
            and self.slots.may_claim_ahead
        ):
            claim_q, peek_q = self.names(self.empty.next_round())
            if self.rate_limited.isdisjoint(claim_q):
                pump.claim_ahead(claim_q, sizers.n(claim_q), peek=peek_q)
        self.run_batch(batch)
        self.check_limits()

    def after_empty(self, claim: Claim, queue_index: int, more_here: bool) -> bool:
        """After a claim that took nothing: settle what finished, claim again (the
        shard a peek saw work in, or the next queue), wait for the jobs in flight or
        for work, or stop. False: the loop ends."""
        # read before collecting: none in flight then, none can finish uncollected
        busy = self.slots.in_flight
        self.jobs_run += self.collect()
        if self.pump.has_pending:
            # a prefetched claim came back empty before this batch's outcomes went
            # out, or jobs in flight finished: settle them first (a retry may make
            # the queue non-empty again)
            return True
        next_due_ms = claim.next_due_ms
        layout = self.layout
        if layout.sharded(queue_index) and queue_index == self.empty.index:
            # at most K chases: shards whose claims take nothing whatever a peek
            # says (a limit of shard 0's from before it was sharded) never loop
            if more_here and self.chased < len(layout.shards[queue_index]):
                self.chased += 1
                return True  # claim the shard the peek found, not the next queue
            if not claim.reply.paused:
                next_due_ms = self.earliest_due(layout.others(queue_index), next_due_ms)
        self.chased = 0
        options = self.options
        step = self.empty.after_empty(
            claim.now_exact_ms,
            next_due_ms,
            burst=options.burst,
            stopping=self.flags.stopping,  # a stop signal may have come during the round trip
            idle_timeout_s=options.idle_timeout_s,
            burst_horizon_s=options.burst_horizon_s,
            paused=claim.reply.paused,
            queue_index=queue_index,
        )
        if isinstance(step, ClaimFrom):
            return True
        if busy:
            # jobs still run: wait for one to finish (its ack goes out with the
            # next claim), not for new work, and look for that now and then
            wait_s = BUSY_POLL_S if isinstance(step, Stop) else min(step.seconds, BUSY_POLL_S)
            self.slots.wait_finished(wait_s, self.is_stopping)
            return True
        self.governor.idle()
        if isinstance(step, Stop):
            if options.burst and not self.flags.stopping:
                self.log_left_scheduled(step.next_due_ms, claim.now_ms)
            return False
        self.sleep(step)
        return True

    def sleep(self, step: Sleep) -> None:
        """Wait for work (a wake-up, or the next due job); what comes next may be
        of another kind, so the batch sizes and the CPU governor measure afresh."""
        if step.paused and not self.was_paused:
            log.info("worker %s: every queue is paused; waiting for a resume", self.worker_id)
        self.was_paused = step.paused
        idle_since = time.monotonic()
        try:
            self.wait_for_work(step.seconds)
        except REDIS_ERRORS as exc:
            self.wait_for_redis(exc)
        # the next jobs may be of another kind: measured afresh
        self.governor.forget()
        self.sizers.forget(time.monotonic() - idle_since)

    def drain(self) -> None:
        """A graceful stop: wait for the jobs in flight (a HardStop cuts it short)."""
        self.jobs_run += self.slots.drain(self.pump.pending)

    def finish(self) -> None:
        """The last word: what is in flight is given up (handed back), and what is
        settled goes out, within ``FLUSH_PATIENCE_S`` (a HardStop cuts it short)."""
        self.jobs_run += self.slots.close(self.pump.pending)
        try:
            self.pump.flush(FLUSH_PATIENCE_S)
        except HardStop:
            log.warning(
                "worker %s: stopped before settling its last batch; its jobs come back "
                "to their queue when its lease expires",
                self.worker_id,
            )

    # -- what the turns do -----------------------------------------------------

    def collect(self) -> int:
        """The outcomes of the jobs in flight that finished, into the next round
        trip; the batch sizer measures those the slots ran one after another."""
        pump = self.pump
        n = self.slots.collect(pump.pending)
        if n:
            ran_s, ran = self.slots.measured()
            if ran:
                self.sizers[self.sized_queue].ran(ran_s, ran, pump.rtt_s)
        return n

    def is_stopping(self) -> bool:
        return self.flags.stopping

    def names(self, round_: Round) -> tuple[list[str], list[str]]:
        """A round's queues in Redis to claim and to peek at: one shard of each
        queue claimed, every shard of each queue peeked at; a round that claims one
        sharded queue also peeks at its other shards, in rotation order, after
        the earlier queues (the first peeked with work is claimed next)."""
        layout = self.layout
        claim = [layout.claim_name(i) for i in round_.claim]
        peek = [name for i in round_.peek for name in layout.shards[i]]
        if len(round_.claim) == 1 and layout.sharded(round_.claim[0]):
            peek += layout.others(round_.claim[0])
        return claim, peek

    def earliest_due(self, shards: list[str], next_due_ms: int) -> int:
        """The earliest due time across ``shards`` and ``next_due_ms`` (-1: none),
        read when a sharded queue came back empty, so that an idle worker wakes for
        a job due in any shard (a claim reports its own shard's only). Best effort:
        on a Redis error, ``next_due_ms``."""
        rt = self.rt
        try:
            firsts = first_due_ms(rt.client, [rt.keys[name] for name in shards])
        except REDIS_ERRORS:
            return next_due_ms
        for due in firsts:
            if due is not None and (next_due_ms < 0 or due < next_due_ms):
                next_due_ms = due
        return next_due_ms

    def log_left_scheduled(self, next_due_ms: int, now_ms: int) -> None:
        """A burst worker's last word: how many jobs it leaves scheduled, and when
        the earliest is due (a job scheduled for later is not its to wait for)."""
        rt = self.rt
        try:
            left = scheduled_count(rt.client, list(rt.keys.values()))
        except REDIS_ERRORS:
            left = -1  # the count is only for the log
        if next_due_ms < 0 and left <= 0:
            log.info("worker %s: burst done, nothing ready or scheduled", self.worker_id)
            return
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(next_due_ms / 1000))
        log.info(
            "worker %s: burst done, nothing ready or due within %g s; left %s jobs "
            "scheduled, the earliest due in %.1f s (%s)",
            self.worker_id,
            self.options.burst_horizon_s,
            left if left >= 0 else "some",
            (next_due_ms - now_ms) / 1000,
            due,
        )

    def idle_quietly(self) -> None:
        """Quiet: settle what is pending, then only wait to be stopped."""
        pump = self.pump
        self.jobs_run += self.slots.collect(pump.pending)
        if self.slots.in_flight:  # they run on: only what finished is settled
            pump.settle()
        elif pump.has_ahead or pump.has_pending:
            log.info("worker %s: quiet, no longer claiming", self.worker_id)
            pump.flush(FLUSH_PATIENCE_S)
        time.sleep(0.2)

    def wait_for_work(self, timeout_s: float) -> None:
        rt, slot = self.rt, self.slot
        if slot is not None:  # the master forks the rest of a pool once one waits
            slot.waiting_for_work(True)
        try:
            self.wait_interruptibly(lambda: rt.wait_for_work(timeout_s))
        finally:
            if slot is not None:
                slot.waiting_for_work(False)

    def check_limits(self) -> None:
        """Recycling: stop gracefully past max_jobs or max_memory_bytes."""
        max_jobs, max_memory_bytes = self.options.max_jobs, self.options.max_memory_bytes
        if max_jobs is not None and self.jobs_run >= max_jobs:
            log.info("worker %s: ran %d jobs, recycling", self.worker_id, self.jobs_run)
            self.flags.stopping = True
        if max_memory_bytes is not None:
            # ~10 µs a batch, and only with a limit: a leak is caught within one batch
            rss = psutil.Process().memory_info().rss
            if rss > max_memory_bytes:
                log.warning(
                    "worker %s: RSS %d MiB over the %d MiB limit, recycling",
                    self.worker_id,
                    rss >> 20,
                    max_memory_bytes >> 20,
                )
                self.flags.stopping = True

    # -- running a batch ---------------------------------------------------------

    def open_batch(self, claim: Claim) -> _Batch:
        """Decode a claimed batch and take its at-most-once jobs out of the queue,
        before a claim is written ahead: the take's reply comes at once, not after
        Redis ran that claim."""
        batch_of = self.rt.batch_of[claim.queue]
        if len(batch_of) > BATCH_OF_MAX:  # ids released or lost since: looked up instead
            batch_of.clear()
        runnable, broken, unknown = claim.reply.decode(self.registry, batch_of)
        deferred: list[tuple[bytes, int, bytes]] = []
        if unknown:  # a rolling deploy's new jobs, perhaps: back for a while
            deferred, expired = self.unknown.sort(unknown, claim.queue, claim.reply.now_ms)
            broken += expired
        taken = None
        if self.at_most_once is not None:
            runnable, taken = self.at_most_once.take(claim, runnable)
        return _Batch(claim.queue, runnable, broken, taken, deferred)

    def run_batch(self, batch: _Batch) -> None:
        pump = self.pump
        queue, runnable = batch.queue, batch.runnable
        out = pump.pending[queue]  # after any claim_ahead: the outcomes of this batch
        for job_id, reason in batch.broken:
            log.error(
                "job %s of queue %s is broken, quarantined: %s", job_id.decode(), queue, reason
            )
        out.broken.extend(batch.broken)
        out.retry.extend(batch.deferred)  # not an attempt: nothing counted failed
        taken = batch.taken
        if taken is not None:
            out.unstarted += taken.unstarted  # a take that failed: not run
        if not runnable:
            return
        index = self.layout.index_of[queue]
        # the jobs it keeps in flight are counted as they finish; the rest run here
        self.sized_queue = queue
        runnable = self.slots.launch(runnable, out, index, queue)
        if not runnable:
            return
        started = time.perf_counter()
        self.governor.batch_started()
        if taken is not None and taken.ids:
            assert self.at_most_once is not None
            ran = self.at_most_once.run(runnable, taken, out, index, queue)
        else:
            ran = self.runner.run(runnable, out, index, queue)
        self.jobs_run += ran
        if log.isEnabledFor(logging.DEBUG):  # one check a batch: off the hot path
            for job_id, target, _, _, attempt, _ in runnable[:ran]:
                log.debug(
                    "job %s %s of queue %s ran (attempt %d)",
                    target.name,
                    job_id.decode(),
                    queue,
                    attempt,
                )
        if ran == len(runnable):  # not cut short by a stop: a measure of these jobs
            batch_s = time.perf_counter() - started
            self.governor.batch_ran(batch_s)
            self.sizers[queue].ran(batch_s, ran, pump.rtt_s)


@dataclass
class _Batch:
    """A claimed batch, decoded; ``taken``: what became of its at-most-once jobs."""

    queue: str
    runnable: list[Runnable]
    broken: list[tuple[bytes, str]]
    taken: Optional[Taken]
    # jobs of names the app lacks, back to the queue with a delay (fastq.worker.unknown)
    deferred: list[tuple[bytes, int, bytes]] = field(default_factory=list)
