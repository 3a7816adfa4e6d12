"""One worker process: claim a batch, run it, and settle it in the next round trip.

The loop is assembled from parts, each in a module of its own: the pump
(:mod:`fastq.worker.pump`) owns what is pending and what is in flight on the round trip;
the batch sizer (:mod:`fastq.worker.sizer`) says how many jobs to claim; the CPU governor
(:class:`fastq.shm.cpuslots.CpuGovernor`) takes a pool's CPU slot while batches are
CPU-bound; a pure decision (:mod:`fastq.worker.decide`) says what follows an empty claim;
a runner (:mod:`fastq.runners.sync`) runs the jobs; job slots (:mod:`fastq.runners.inflight`)
say how many to claim and keep jobs in flight (:mod:`fastq.runners.aio`: ``async def``
jobs, up to ``concurrency`` at once; :mod:`fastq.runners.threads`: sync jobs in
``threads`` threads) while the loop claims and settles.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

import psutil

from fastq import logs
from fastq.connection.checks import check_redis
from fastq.connection.faults import REDIS_ERRORS, Outage
from fastq.connection.url import mask_url
from fastq.context import ProgressBuffer
from fastq.errors import FastqError
from fastq.job import Runnable
from fastq.protocol.keys import validate_queue_name
from fastq.ratelimit import KeyGate
from fastq.runners.factory import build_runners
from fastq.runners.sync import HardStop
from fastq.shm.cpuslots import CpuGovernor, CpuSlots
from fastq.shm.heartbeat import Heartbeat, HeartbeatSlot
from fastq.shm.metrics import ChildMetrics
from fastq.worker.atmostonce import AtMostOnce, Taken
from fastq.worker.decide import ClaimFrom, EmptyClaims, Round, Stop
from fastq.worker.leases import LeaseKeeper
from fastq.worker.pump import Pump
from fastq.worker.queues import QueueLayout
from fastq.worker.roundtrip import Claim, RoundTrip
from fastq.worker.sizer import QueueSizers

if TYPE_CHECKING:
    from fastq.app import App
    from fastq.job import JobDef

__all__ = ["HardStop", "RedisGaveUp", "Worker", "default_worker_id"]

log = logging.getLogger("fastq.worker")

MAX_BATCH = 1000
# A stopping worker tries this long to settle what it holds while Redis is away;
# what is left then comes back to the queue when its lease expires.
FLUSH_PATIENCE_S = 1.5
# The lease keeper's calls time out within this (and within a tenth of a lease).
LEASE_CALL_TIMEOUT_S = 2.0
# With jobs in flight and the queues empty, a worker looks for new work this often.
BUSY_POLL_S = 0.1
# The read of the queues' shard counts at start times out within this.
CHECK_TIMEOUT_S = 5.0


class RedisGaveUp(FastqError):
    """A burst worker found Redis unavailable for longer than it may wait."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Worker:
    """Runs jobs of ``queues`` (in priority order) from ``app``.

    The constructor touches no process state; ``run()`` opens the connections,
    so a Worker may be built before a fork and run after it.

    Args:
        batch_size: the most jobs claimed per round trip (1 to 1000). The batch
            adapts below it so that one holds about ``target_batch_s`` of work;
            on a worker of one queue, a batch of quick jobs grows past it (up to
            10 times, at most 1,000 jobs and 10 ms of work) to cover the measured
            round trip to Redis.
        burst: return once every queue is empty and nothing is due within
            ``burst_horizon_s``; what is left scheduled is logged (how many, the
            earliest due time).
        burst_horizon_s: how far ahead a burst worker waits for a scheduled job
            (a retry in backoff, a delayed job) before it exits (default 1 s).
        lease_s: how long a claimed job stays leased; a heartbeat thread extends
            the leases of held jobs every third of it.
        idle_timeout_s: longest single wait for a wake-up when idle.
        handle_signals: install handlers (SIGTERM/SIGINT: graceful, then hard
            stop; SIGUSR1: quiet; SIGALRM: job timeouts). Job ``timeout_s`` is
            enforced only with them.
        slot: a master's heartbeat slot (set by ``fastq pool``).
        metrics: where it counts its jobs for the master's /metrics (``fastq pool
            --metrics-port``).
        parent_pid: stop when the parent process changes (the master died).
        max_jobs: stop after about this many jobs (recycling).
        max_memory_bytes: stop when the process' RSS exceeds this (recycling).
        cpu_slots: a pool's CPU slots: taken while this worker's batches are
            CPU-bound, so an oversubscribed host does not time-slice itself (not
            taken by a worker with an event loop: see ``concurrency``).
        redis_patience_s: give up (raise ``RedisGaveUp``) once Redis has been
            unavailable this long; None: wait for it forever. Burst workers
            default to 30 s, long-running ones to forever.
        concurrency: ``async def`` jobs in flight at most (on an event loop of the
            worker's, :mod:`fastq.runners.aio`). Without ``threads``, sync jobs run one at a
            time in the worker's thread whatever it is (a sync job blocks the claims
            meanwhile, not the async jobs in flight). A worker of an app without
            async jobs and a concurrency of 1 runs no event loop.
        threads: run sync jobs in this many threads (:mod:`fastq.runners.threads`), as many
            in flight; 0 (the default): one at a time in the worker's thread. A job
            past its ``timeout_s`` in a thread is settled as timed out, and the
            worker then stops claiming, finishes the others and exits (recycled:
            a thread cannot be killed).
    """

    def __init__(
        self,
        app: App,
        queues: list[str],
        *,
        batch_size: int = 100,
        burst: bool = False,
        lease_s: float = 60.0,
        idle_timeout_s: float = 5.0,
        worker_id: Optional[str] = None,
        handle_signals: bool = True,
        slot: Optional[HeartbeatSlot] = None,
        metrics: Optional[ChildMetrics] = None,
        parent_pid: Optional[int] = None,
        max_jobs: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
        target_batch_s: float = 0.1,
        cpu_slots: Optional[CpuSlots] = None,
        redis_patience_s: Optional[float] = None,
        burst_horizon_s: float = 1.0,
        concurrency: int = 1,
        threads: int = 0,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for q in queues:
            validate_queue_name(q)
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch size must be within 1..{MAX_BATCH}, not {batch_size}")
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, not {lease_s}")
        if not (isinstance(burst_horizon_s, (int, float)) and 0 <= burst_horizon_s < float("inf")):
            raise ValueError(
                f"burst_horizon_s must be a finite number >= 0, not {burst_horizon_s!r}"
            )
        self.app = app
        self.queues = list(dict.fromkeys(queues))
        self.burst = burst
        self.burst_horizon_s = float(burst_horizon_s)
        self.lease_ms = int(lease_s * 1000)
        self.idle_timeout_s = idle_timeout_s
        self.worker_id = worker_id
        self.handle_signals = handle_signals
        self.slot = slot
        self.parent_pid = parent_pid
        self.max_jobs = max_jobs
        self.max_memory_bytes = max_memory_bytes
        if redis_patience_s is None and burst:
            redis_patience_s = 30.0
        self.redis_patience_s = redis_patience_s
        # a batch holds ~target_batch_s of work, and well under a lease
        self.sizers = QueueSizers(self.queues, batch_size, min(target_batch_s, lease_s / 4))
        self._sized_queue = self.queues[0]  # whose jobs the slots measure (one slot)
        self.governor = CpuGovernor(cpu_slots)
        self.progress = ProgressBuffer()
        self.runner, self.slots = build_runners(
            self, lambda: str(self.worker_id), app.registry.values(), app.hooks,
            slot=slot, progress=self.progress, metrics=metrics, concurrency=concurrency,
            threads=threads, max_claim=batch_size, on_stuck=self._recycle_stuck,
        )  # fmt: skip
        self.concurrency = concurrency
        self.threads = threads
        if not self.slots.may_claim_ahead:
            # its jobs are not run to completion, so their batches are not measured:
            # they are taken to wait, and its worker takes no CPU slot
            self.governor = CpuGovernor(None)
        self.stopping = False
        self.quiet = False
        self.jobs_run = 0
        # the queues' shards, from Redis' record: set in init_process
        self.layout = QueueLayout(self.queues, {})
        self._registry: dict[str, JobDef[Any]] = {}
        self._outage = Outage("worker", log)  # named in init_process
        self._rt: Optional[RoundTrip] = None
        self._pump: Optional[Pump] = None
        self._at_most_once: Optional[AtMostOnce] = None  # set if the app has such jobs
        self._heartbeat: Optional[Heartbeat] = None
        self._leases: Optional[LeaseKeeper] = None
        self._waiting = False

    # -- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; finish the job in hand; hand back what was not started."""
        self.stopping = True

    def _handle_stop_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """First signal: graceful stop. Second: interrupt the running job."""
        if self.stopping or self._waiting:
            # a blocked BLPOP would otherwise sit out its whole timeout
            raise HardStop(signal.Signals(signum).name)
        log.info(
            "worker %s: %s, stopping after the job in hand",
            self.worker_id,
            signal.Signals(signum).name,
        )
        self.stopping = True

    def _on_orphaned(self) -> None:
        """From the heartbeat thread: the master is gone. A SIGTERM to ourselves
        stops gracefully and also ends a wait (BLPOP, CPU slot) at once."""
        log.warning("worker %s: its master is gone, stopping", self.worker_id)
        if self.runner.alarms:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            self.stop()

    def _recycle_stuck(self) -> None:
        """From a thread runner's watchdog: a job in a thread ran past its timeout
        and cannot be stopped; stop claiming, let the others finish, exit (a pool's
        master forks a fresh child). Only sets a flag."""
        self.stopping = True

    def _handle_quiet_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """Stop claiming, keep running (for deploys). Only sets a flag."""
        self.quiet = True

    def init_process(self) -> None:
        """Per-process set-up, after any fork: signals, heartbeat, then the queues'
        shards (from Redis, waited for) and the connections."""
        if self.worker_id is None:
            self.worker_id = default_worker_id()
        self._registry = dict(self.app.registry)
        self._outage = Outage(f"worker {self.worker_id}", log)
        logs.set_process_field("worker", str(self.worker_id))
        self.governor.open()  # here: it measures this (the main) thread
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle_stop_signal)
            signal.signal(signal.SIGINT, self._handle_stop_signal)
            signal.signal(signal.SIGUSR1, self._handle_quiet_signal)
            signal.signal(signal.SIGALRM, self.runner.on_alarm)
            self.runner.alarms = True
        if self.slot is not None:
            self.slot.reset()
        self.slots.start()
        self._heartbeat = Heartbeat(
            on_orphaned=self._on_orphaned,
            # an event loop beats itself: a job that blocks it leaves the master's slot unbeaten
            slot=None if self.slots.beats_itself else self.slot,
            parent_pid=self.parent_pid,
            watch=self.slots.watch,
        )
        # beating before the shards are read: a child that waits for Redis at boot
        # is alive, not hung
        self._heartbeat.start()
        try:
            self._open_queues(self._shard_counts())
        except BaseException:
            self._heartbeat.stop()
            self.slots.close({})
            raise
        for hook in self.app.hooks.worker_start:
            hook()

    def _open_queues(self, shard_counts: dict[str, int]) -> None:
        """The queues in Redis this worker serves (:class:`fastq.worker.queues.QueueLayout`)
        and what talks to them: the round trip, the pump, the lease keeper."""
        self.layout = layout = QueueLayout(self.queues, shard_counts)
        for name in layout.physical:
            self.sizers.alias(name, layout.logical[layout.index_of[name]])
        # A reply is waited for as long as a lease lasts: a Redis that stalls (a big
        # fork, a slow disk) answers in the end, and a request abandoned on a timed-out
        # socket could still be run by Redis after the worker has moved on.
        socket_timeout_s = self.lease_ms / 1000 + self.idle_timeout_s
        self._rt = rt = RoundTrip(
            lambda: self.app.new_client(retries=0, socket_timeout_s=socket_timeout_s),
            str(self.worker_id),
            layout.physical,
            self.app.namespace,
            cluster=self.app.cluster,
            lease_ms=self.lease_ms,
            dead_max_age_ms=self.app.dead_max_age_ms,
            dead_max_len=self.app.dead_max_len,
            max_stalls=self.app.max_stalls,
        )
        self._pump = Pump(rt, layout.physical, self._outage)
        self.runner.gate = KeyGate(lambda: rt.client, self.app.namespace, layout.rate_home)
        if any(job.at_most_once for job in self._registry.values()):
            self._at_most_once = AtMostOnce(rt, self.runner, f"worker {self.worker_id}")
        call_timeout_s = min(LEASE_CALL_TIMEOUT_S, self.lease_ms / 10_000)
        self._leases = LeaseKeeper(
            lambda: self.app.new_client(
                retries=0, socket_timeout_s=call_timeout_s, connect_timeout_s=call_timeout_s
            ),
            str(self.worker_id),
            list(rt.keys.values()),
            self.lease_ms,
            self.progress,
        )
        self._leases.start()

    def _shard_counts(self) -> dict[str, int]:
        """The shard count of each queue served (:mod:`fastq.protocol.shards`): Redis' record,
        with the app's declarations written to it. Waited for while Redis is away
        (a stop signal ends the wait: then the app's own counts, for a worker that
        only stops): without it the worker cannot know which queues to serve.

        Raises:
            fastq.ShardCountMismatch: the app declares another count than Redis'.
            RedisGaveUp: as ``_wait_for_redis``.
        """
        while not self.stopping:
            client = None
            try:
                # made here: a cluster's client connects as it is made
                client = self.app.new_client(retries=0, socket_timeout_s=CHECK_TIMEOUT_S)
                counts = self.app.shard_counts.resolve(client, self.app.namespace, self.queues)
            except REDIS_ERRORS as exc:
                self._wait_for_redis(exc)
                continue
            finally:
                if client is not None:
                    client.close()
            self._outage.recovered()
            return counts
        return dict(self.app.shard_counts.declared)

    def run(self) -> None:
        """Work until stopped (or, in burst mode, until the queues are empty)."""
        check_redis(self.app, "worker")  # a pool's master checks once for its children
        self.init_process()
        self.run_loop()

    def run_loop(self) -> None:
        """``run()`` after ``init_process()``: the master boots them apart to tell
        a boot error from a crash."""
        log.info(
            "worker %s: Redis %s, namespace %s, queues %s, jobs %s",
            self.worker_id, mask_url(self.app.redis_url), self.app.namespace,
            ",".join(
                q if len(names) == 1 else f"{q} ({len(names)} shards)"
                for q, names in zip(self.queues, self.layout.shards)
            ),
            ",".join(sorted(self._registry)) or "none",
        )  # fmt: skip
        assert self._rt is not None and self._pump is not None
        assert self._heartbeat is not None and self._leases is not None
        try:
            self._loop(self._pump)
            self.jobs_run += self.slots.drain(self._pump.pending)
        except HardStop as stop:
            # the operator's second signal: the job in hand goes back, not counted a stall
            log.info("worker %s: %s again, interrupted", self.worker_id, stop)
        finally:
            self.jobs_run += self.slots.close(self._pump.pending)
            try:
                self._pump.flush(FLUSH_PATIENCE_S)
            except HardStop:
                log.warning(
                    "worker %s: stopped before settling its last batch; its jobs come back "
                    "to their queue when its lease expires", self.worker_id,
                )  # fmt: skip
            self._leases.stop()
            self._heartbeat.stop()
            self._rt.close()
            self.governor.close()
            self.app.hooks.run_worker_stop()
        log.info("worker %s: stopped after %d jobs", self.worker_id, self.jobs_run)

    # -- the loop --------------------------------------------------------------

    def _loop(self, pump: Pump) -> None:
        queues = self.queues
        sizers = self.sizers
        governor = self.governor
        slots = self.slots
        layout = self.layout
        stopping = self._is_stopping
        empty = EmptyClaims(len(queues))
        # empty claims of a sharded queue followed by a claim of the shard a peek saw
        # work in, since its last batch
        chased = 0
        was_paused = False  # say so once when every queue is paused, not at every wake-up
        # queues whose last claim said they have a rate limit (the first claim tells)
        rate_limited: set[str] = set()
        while not self.stopping:
            if self.quiet:
                self._idle_quietly(pump)
                continue
            claim_q: list[str] = []  # nothing to write: a claim is in flight or in hand
            peek_q: list[str] = []
            n = 0  # a claim in flight or in hand asked for its own
            if not pump.has_ahead:
                claim_q, peek_q = self._names(empty.next_round())
                # at most the free slots: may wait for enough of them to free
                n = slots.claim_n(sizers.n(claim_q), stopping)
                governor.before_claim(pump.settle, self._wait_interruptibly)
                if self.stopping:
                    break
            self.jobs_run += self._collect(pump)  # goes out with this claim
            try:
                claim = pump.claim(claim_q, n, peek=peek_q)
            except REDIS_ERRORS as exc:
                self._wait_for_redis(exc)
                continue
            if claim.reply.rate_limited:
                rate_limited.add(claim.queue)
            else:
                rate_limited.discard(claim.queue)
            queue_index = layout.index_of[claim.queue]
            peeked = pump.take_peeked()
            more_here = False  # another shard of this claim's queue has work
            if peeked is not None:
                layout.found_work(peeked)  # a sharded queue claims that shard next
                peeked_index = layout.index_of[peeked]
                if peeked_index == queue_index:
                    more_here = True
                else:
                    empty.saw_work(peeked_index)
            if len(claim):
                was_paused = False
                chased = 0
                empty.got_jobs(queue_index)
                batch = self._open_batch(claim)
                # strict priority: a peek at every queue before this one, and this one;
                # never ahead on a rate-limited queue: tokens are for jobs that start now
                if (
                    sizers[claim.queue].prefetch_pays()
                    and not pump.has_ahead
                    and slots.may_claim_ahead
                ):
                    claim_q, peek_q = self._names(empty.next_round())
                    if rate_limited.isdisjoint(claim_q):
                        pump.claim_ahead(claim_q, sizers.n(claim_q), peek=peek_q)
                self._run_batch(batch, pump)
                self._check_limits()
                continue
            # read before collecting: none in flight then, none can finish uncollected
            busy = slots.in_flight
            self.jobs_run += self._collect(pump)
            if pump.has_pending:
                # a prefetched claim came back empty before this batch's outcomes went
                # out, or jobs in flight finished: settle them first (a retry may make
                # the queue non-empty again)
                continue
            next_due_ms = claim.next_due_ms
            if layout.sharded(queue_index) and queue_index == empty.index:
                # at most K chases: shards whose claims take nothing whatever a peek
                # says (a limit of shard 0's from before it was sharded) never loop
                if more_here and chased < len(layout.shards[queue_index]):
                    chased += 1
                    continue  # claim the shard the peek found, not the next queue
                if not claim.reply.paused:
                    next_due_ms = self._earliest_due(layout.others(queue_index), next_due_ms)
            chased = 0
            step = empty.after_empty(
                claim.now_exact_ms,
                next_due_ms,
                burst=self.burst,
                stopping=self.stopping,  # a stop signal may have come during the round trip
                idle_timeout_s=self.idle_timeout_s,
                burst_horizon_s=self.burst_horizon_s,
                paused=claim.reply.paused,
                queue_index=queue_index,
            )
            if isinstance(step, ClaimFrom):
                continue
            if busy:
                # jobs still run: wait for one to finish (its ack goes out with the
                # next claim), not for new work, and look for that now and then
                wait_s = BUSY_POLL_S if isinstance(step, Stop) else min(step.seconds, BUSY_POLL_S)
                slots.wait_finished(wait_s, stopping)
                continue
            governor.idle()
            if isinstance(step, Stop):
                if self.burst and not self.stopping:
                    self._log_left_scheduled(step.next_due_ms, claim.now_ms)
                return
            if step.paused and not was_paused:
                log.info("worker %s: every queue is paused; waiting for a resume", self.worker_id)
            was_paused = step.paused
            idle_since = time.monotonic()
            try:
                self._wait_for_work(step.seconds)
            except REDIS_ERRORS as exc:
                self._wait_for_redis(exc)
            # the next jobs may be of another kind: measured afresh
            governor.forget()
            sizers.forget(time.monotonic() - idle_since)

    def _collect(self, pump: Pump) -> int:
        """The outcomes of the jobs in flight that finished, into the next round
        trip; the batch sizer measures those the slots ran one after another."""
        n = self.slots.collect(pump.pending)
        if n:
            ran_s, ran = self.slots.measured()
            if ran:
                self.sizers[self._sized_queue].ran(ran_s, ran, pump.rtt_s)
        return n

    def _is_stopping(self) -> bool:
        return self.stopping

    def _names(self, round_: Round) -> tuple[list[str], list[str]]:
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

    def _earliest_due(self, shards: list[str], next_due_ms: int) -> int:
        """The earliest due time across ``shards`` and ``next_due_ms`` (-1: none),
        read when a sharded queue came back empty, so that an idle worker wakes for
        a job due in any shard (a claim reports its own shard's only). Best effort:
        on a Redis error, ``next_due_ms``."""
        rt = self._rt
        assert rt is not None
        try:
            pipe = rt.client.pipeline(transaction=False)
            for name in shards:
                pipe.zrange(rt.keys[name].scheduled, 0, 0, withscores=True)
            replies = pipe.execute()
        except REDIS_ERRORS:
            return next_due_ms
        for first in replies:
            if first:
                due = int(first[0][1])
                if next_due_ms < 0 or due < next_due_ms:
                    next_due_ms = due
        return next_due_ms

    def _log_left_scheduled(self, next_due_ms: int, now_ms: int) -> None:
        """A burst worker's last word: how many jobs it leaves scheduled, and when
        the earliest is due (a job scheduled for later is not its to wait for)."""
        rt = self._rt
        assert rt is not None
        try:
            pipe = rt.client.pipeline(transaction=False)
            for k in rt.keys.values():
                pipe.zcard(k.scheduled)
            left = sum(pipe.execute())
        except REDIS_ERRORS:
            left = -1  # the count is only for the log
        if next_due_ms < 0 and left <= 0:
            log.info("worker %s: burst done, nothing ready or scheduled", self.worker_id)
            return
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(next_due_ms / 1000))
        log.info(
            "worker %s: burst done, nothing ready or due within %g s; left %s jobs "
            "scheduled, the earliest due in %.1f s (%s)",
            self.worker_id, self.burst_horizon_s, left if left >= 0 else "some",
            (next_due_ms - now_ms) / 1000, due,
        )  # fmt: skip

    def _idle_quietly(self, pump: Pump) -> None:
        """Quiet: settle what is pending, then only wait to be stopped."""
        self.jobs_run += self.slots.collect(pump.pending)
        if self.slots.in_flight:  # they run on: only what finished is settled
            pump.settle()
        elif pump.has_ahead or pump.has_pending:
            log.info("worker %s: quiet, no longer claiming", self.worker_id)
            pump.flush(FLUSH_PATIENCE_S)
        time.sleep(0.2)

    def _wait_for_work(self, timeout_s: float) -> None:
        rt = self._rt
        assert rt is not None
        if self.slot is not None:  # the master forks the rest of a pool once one waits
            self.slot.waiting_for_work(True)
        try:
            self._wait_interruptibly(lambda: rt.wait_for_work(timeout_s))
        finally:
            if self.slot is not None:
                self.slot.waiting_for_work(False)

    def _wait_interruptibly(self, wait: Callable[[], object]) -> bool:
        """Block in ``wait`` (nothing running meanwhile), which a stop signal cuts
        short: then the worker is stopping and this returns False."""
        self._waiting = True
        try:
            wait()
            return True
        except HardStop:
            self.stopping = True
            return False
        finally:
            self._waiting = False

    def _wait_for_redis(self, exc: BaseException) -> None:
        """Back off after a Redis fault (logged once per outage), in a wait that a
        stop signal ends at once. A bug (an error that is no fault of Redis) is raised.

        Raises:
            RedisGaveUp: Redis has been unavailable for longer than ``redis_patience_s``.
        """
        delay = self._outage.failed(exc)
        patience = self.redis_patience_s
        if patience is not None and time.monotonic() - self._outage.since > patience:
            raise RedisGaveUp(
                f"worker {self.worker_id}: Redis at {mask_url(self.app.redis_url)} unavailable for "
                f"{patience:g} s, giving up: {exc}"
            ) from None
        self._wait_interruptibly(lambda: time.sleep(delay))

    def _check_limits(self) -> None:
        """Recycling: stop gracefully past max_jobs or max_memory_bytes."""
        if self.max_jobs is not None and self.jobs_run >= self.max_jobs:
            log.info("worker %s: ran %d jobs, recycling", self.worker_id, self.jobs_run)
            self.stopping = True
        if self.max_memory_bytes is not None:
            # ~10 µs a batch, and only with a limit: a leak is caught within one batch
            rss = psutil.Process().memory_info().rss
            if rss > self.max_memory_bytes:
                log.warning(
                    "worker %s: RSS %d MiB over the %d MiB limit, recycling",
                    self.worker_id, rss >> 20, self.max_memory_bytes >> 20,
                )  # fmt: skip
                self.stopping = True

    # -- running a batch ---------------------------------------------------------

    def _open_batch(self, claim: Claim) -> _Batch:
        """Decode a claimed batch and take its at-most-once jobs out of the queue,
        before a claim is written ahead: the take's reply comes at once, not after
        Redis ran that claim."""
        runnable, broken = claim.reply.decode(self._registry)
        taken = None
        if self._at_most_once is not None:
            runnable, taken = self._at_most_once.take(claim, runnable)
        return _Batch(claim.queue, runnable, broken, taken)

    def _run_batch(self, batch: _Batch, pump: Pump) -> None:
        queue, runnable = batch.queue, batch.runnable
        out = pump.pending[queue]  # after any claim_ahead: the outcomes of this batch
        for job_id, reason in batch.broken:
            log.error(
                "job %s of queue %s is broken, quarantined: %s", job_id.decode(), queue, reason
            )
        out.broken.extend(batch.broken)
        taken = batch.taken
        if taken is not None:
            out.unstarted += taken.unstarted  # a take that failed: not run
        if not runnable:
            return
        index = self.layout.index_of[queue]
        # the jobs it keeps in flight are counted as they finish; the rest run here
        self._sized_queue = queue
        runnable = self.slots.launch(runnable, out, index, queue)
        if not runnable:
            return
        started = time.perf_counter()
        self.governor.batch_started()
        if taken is not None and taken.ids:
            assert self._at_most_once is not None
            ran = self._at_most_once.run(runnable, taken, out, index, queue)
        else:
            ran = self.runner.run(runnable, out, index, queue)
        self.jobs_run += ran
        if log.isEnabledFor(logging.DEBUG):  # one check a batch: off the hot path
            for job_id, target, _, _, attempt, _ in runnable[:ran]:
                log.debug(
                    "job %s %s of queue %s ran (attempt %d)",
                    target.name, job_id.decode(), queue, attempt,
                )  # fmt: skip
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
