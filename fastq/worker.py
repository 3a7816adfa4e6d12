"""One worker process: claim a batch, run it, and settle it in the next round trip."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

import psutil

from fastq.batch import Claim, Outcomes, Request, RoundTrip
from fastq.cpuslots import BatchProfile, CpuSlots
from fastq.errors import Fail, FastqError, JobTimeout, Retry
from fastq.heartbeat import Heartbeat, HeartbeatSlot, LeaseKeeper
from fastq.keys import validate_queue_name
from fastq.redis_faults import REDIS_ERRORS, Outage
from fastq.settle import settle_failure

if TYPE_CHECKING:
    from fastq.app import App
    from fastq.job import JobDef

log = logging.getLogger("fastq.worker")

MAX_BATCH = 1000
# Prefetch the next batch while running this one only when a batch is this quick:
# it hides the round trip, and slow jobs are better shared out among siblings.
PREFETCH_MAX_BATCH_S = 0.02
# A batch shorter than this tells its siblings nothing: timing noise decides whether
# a few microseconds of work look CPU-bound (one in a few hundred do not).
SHARED_VERDICT_MIN_S = 0.001
# Idle this long, a worker sizes its next batches afresh (see _forget_job_profile).
FORGET_DURATION_AFTER_IDLE_S = 0.5
# A stopping worker tries this long to settle what it holds while Redis is away;
# what is left then comes back to the queue when its lease expires.
FLUSH_PATIENCE_S = 1.5
# A reply this late means Redis stalled (a big fork, a slow disk): said in the log.
SLOW_REPLY_S = 2.0
# The lease keeper's calls time out within this (and within a tenth of a lease).
LEASE_CALL_TIMEOUT_S = 2.0
_OUTCOME_TYPES = (Retry, Fail)
_REDIS_DOWN = REDIS_ERRORS


class HardStop(BaseException):
    """Raised inside a running job by a second stop signal."""


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
            adapts below it so that one holds about ``target_batch_s`` of work.
        burst: return once every queue is empty and nothing is scheduled.
        lease_s: how long a claimed job stays leased; a heartbeat thread extends
            the leases of held jobs every third of it.
        idle_timeout_s: longest single wait for a wake-up when idle.
        handle_signals: install handlers (SIGTERM/SIGINT: graceful, then hard
            stop; SIGUSR1: quiet; SIGALRM: job timeouts). Job ``timeout_s`` is
            enforced only with them.
        slot: a master's heartbeat slot (set by ``fastq pool``).
        parent_pid: stop when the parent process changes (the master died).
        max_jobs: stop after about this many jobs (recycling).
        max_memory_bytes: stop when the process' RSS exceeds this (recycling).
        cpu_slots: a pool's CPU slots: taken while this worker's batches are
            CPU-bound, so an oversubscribed host does not time-slice itself.
        redis_patience_s: give up (raise ``RedisGaveUp``) once Redis has been
            unavailable this long; None: wait for it forever. Burst workers
            default to 30 s, long-running ones to forever.
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
        parent_pid: Optional[int] = None,
        max_jobs: Optional[int] = None,
        max_memory_bytes: Optional[int] = None,
        target_batch_s: float = 0.1,
        cpu_slots: Optional[CpuSlots] = None,
        redis_patience_s: Optional[float] = None,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for q in queues:
            validate_queue_name(q)
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch size must be within 1..{MAX_BATCH}, not {batch_size}")
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, not {lease_s}")
        self.app = app
        self.queues = list(dict.fromkeys(queues))
        self.batch_size = batch_size
        self.burst = burst
        self.lease_ms = int(lease_s * 1000)
        self.idle_timeout_s = idle_timeout_s
        self.worker_id = worker_id
        self.handle_signals = handle_signals
        self.slot = slot
        self.parent_pid = parent_pid
        self.max_jobs = max_jobs
        self.max_memory_bytes = max_memory_bytes
        self.cpu_slots = cpu_slots
        if redis_patience_s is None and burst:
            redis_patience_s = 30.0
        self.redis_patience_s = redis_patience_s
        # Was the last batch mostly CPU? None: not measured (new, or back from
        # idle, see _forget_job_profile). Then a pool's child goes by its siblings'
        # latest verdict, and without one counts as CPU-bound, so that the idle
        # children one blast wakes do not all claim at once.
        self._cpu_bound: Optional[bool] = None
        self._profile: BatchProfile
        # a batch holds ~target_batch_s of work, and well under a lease
        self.target_batch_s = min(target_batch_s, lease_s / 4)
        self.stopping = False
        self.quiet = False
        self.jobs_run = 0
        self._batch_n = 1  # doubles, up to what job durations allow
        self._job_s = 0.0
        self._pending: dict[str, Outcomes] = {}
        self._queue_index = {q: i for i, q in enumerate(self.queues)}
        self._rt: Optional[RoundTrip] = None
        self._heartbeat: Optional[Heartbeat] = None
        self._leases: Optional[LeaseKeeper] = None
        self._registry: dict[str, JobDef[Any]] = {}
        self._outage = Outage("worker", log)  # named in init_process
        self._release_all = False  # a reply was lost: hand back leases never seen
        self._ahead: Optional[Request] = None  # a claim written, its reply not read yet
        self._waiting = False
        self._alarms = False
        self._in_job = False
        self._timeout_s = 0.0

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
        if self._alarms:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            self.stop()

    def _handle_quiet_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """Stop claiming, keep running (for deploys). Only sets a flag."""
        self.quiet = True

    def _handle_alarm(self, signum: int, frame: Optional[FrameType]) -> None:
        if self._in_job:  # not if the job finished just before the alarm
            raise JobTimeout(f"the job ran past its timeout_s={self._timeout_s:g}")

    def init_process(self) -> None:
        """Per-process set-up, after any fork: connections, signals, heartbeat."""
        if self.worker_id is None:
            self.worker_id = default_worker_id()
        self._registry = dict(self.app.registry)
        self._outage = Outage(f"worker {self.worker_id}", log)
        # A reply is waited for as long as a lease lasts: a Redis that stalls (a big
        # fork, a slow disk) answers in the end, and a request abandoned on a timed-out
        # socket could still be run by Redis after the worker has moved on.
        client = self.app.new_client(
            retries=0, socket_timeout_s=self.lease_ms / 1000 + self.idle_timeout_s
        )
        self._rt = RoundTrip(
            client,
            self.worker_id,
            self.queues,
            self.app.namespace,
            lease_ms=self.lease_ms,
            dead_max_age_ms=self.app.dead_max_age_ms,
            dead_max_len=self.app.dead_max_len,
            max_stalls=self.app.max_stalls,
        )
        self._pending = {q: Outcomes() for q in self.queues}
        self._profile = BatchProfile()  # here: it measures this (the main) thread
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle_stop_signal)
            signal.signal(signal.SIGINT, self._handle_stop_signal)
            signal.signal(signal.SIGUSR1, self._handle_quiet_signal)
            signal.signal(signal.SIGALRM, self._handle_alarm)
            self._alarms = True
        if self.slot is not None:
            self.slot.reset()
        self._heartbeat = Heartbeat(
            on_orphaned=self._on_orphaned, slot=self.slot, parent_pid=self.parent_pid
        )
        self._heartbeat.start()
        call_timeout_s = min(LEASE_CALL_TIMEOUT_S, self.lease_ms / 10_000)
        self._leases = LeaseKeeper(
            lambda: self.app.new_client(
                retries=0, socket_timeout_s=call_timeout_s, connect_timeout_s=call_timeout_s
            ),
            self.worker_id,
            list(self._rt.keys.values()),
            self.lease_ms,
        )
        self._leases.start()
        for hook in self.app.worker_start_hooks:
            hook()

    def run(self) -> None:
        """Work until stopped (or, in burst mode, until the queues are empty)."""
        self.init_process()
        self.run_loop()

    def run_loop(self) -> None:
        """``run()`` after ``init_process()``: the master boots them apart to tell
        a boot error from a crash."""
        log.info("worker %s: queues %s", self.worker_id, ",".join(self.queues))
        assert self._rt is not None and self._heartbeat is not None and self._leases is not None
        try:
            self._loop()
        except HardStop as stop:
            # the operator's second signal: the job in hand goes back, not counted a stall
            log.info("worker %s: %s again, interrupted", self.worker_id, stop)
        finally:
            self._flush()
            self._leases.stop()
            self._heartbeat.stop()
            self._rt.close()
            self._profile.close()
        log.info("worker %s: stopped after %d jobs", self.worker_id, self.jobs_run)

    # -- the loop --------------------------------------------------------------

    def _loop(self) -> None:
        rt = self._rt
        assert rt is not None
        queues = self.queues
        index = 0  # the queue to claim from; back to 0 after every batch (strict priority)
        empty_in_a_row = 0
        next_due_ms = -1
        while not self.stopping:
            if self.quiet:
                self._idle_quietly()
                continue
            try:
                if self._ahead is not None:
                    request, self._ahead = self._ahead, None
                else:
                    if self.cpu_slots is not None:
                        self._govern_cpu()
                        if self.stopping:
                            break
                    claim_n = (queues[index], self._batch_n)
                    request = rt.request(self._pending, claim_n, release_all=self._release_all)
                    self._pending = {q: Outcomes() for q in queues}
                claim = self._answer(request)
            except _REDIS_DOWN as exc:
                self._release_all = True  # what went out, and what ran, is unknown
                self._wait_for_redis(exc)
                continue
            self._outage.recovered()
            self._release_all = False
            assert claim is not None
            if len(claim):
                index, empty_in_a_row, next_due_ms = 0, 0, -1
                if self._job_s and self._job_s * self._batch_n < PREFETCH_MAX_BATCH_S:
                    self._prefetch()
                self._run_batch(claim)
                self._check_limits()
                continue
            if any(self._pending.values()):
                # a prefetched claim came back empty before this batch's outcomes went
                # out: settle them first (a retry may make the queue non-empty again)
                continue
            if claim.next_due_ms >= 0 and (next_due_ms < 0 or claim.next_due_ms < next_due_ms):
                next_due_ms = claim.next_due_ms
            empty_in_a_row += 1
            index = (index + 1) % len(queues)
            if empty_in_a_row < len(queues):
                continue
            # every queue came back empty: sleep until a wake-up or the next due job
            if self.cpu_slots is not None:
                self.cpu_slots.release()
            if self.stopping or (self.burst and next_due_ms < 0):
                return  # (a stop signal may have come during the round trip)
            wait_s = self.idle_timeout_s
            if next_due_ms >= 0:
                wait_s = min(wait_s, max(next_due_ms - claim.now_ms, 1) / 1000.0)
            idle_since = time.monotonic()
            try:
                self._wait_for_work(wait_s)
            except _REDIS_DOWN as exc:
                self._wait_for_redis(exc)
            self._forget_job_profile(time.monotonic() - idle_since)
            index, empty_in_a_row, next_due_ms = 0, 0, -1

    def _forget_job_profile(self, idle_s: float) -> None:
        """After idling, the next jobs may be of another kind (an SMTP blast after
        CPU-bound ones): whether they are CPU-bound is measured afresh, and after a
        long spell their duration too, from a claim of one job. Not after a short
        one: a stream with gaps would then claim one job at a time while more wait."""
        self._cpu_bound = None
        if idle_s >= FORGET_DURATION_AFTER_IDLE_S:
            self._batch_n = 1
            self._job_s = 0.0

    def _govern_cpu(self) -> None:
        """Hold a CPU slot while batches are CPU-bound; let it go otherwise."""
        assert self.cpu_slots is not None
        cpu_bound = self._cpu_bound
        if cpu_bound is None:
            cpu_bound = self.cpu_slots.last_verdict()
        if cpu_bound is False:
            self.cpu_slots.release()
            return
        if self.cpu_slots.try_acquire():
            return
        if any(self._pending.values()):
            # settle what ran before waiting, so that its jobs are not held meanwhile
            assert self._rt is not None
            request = self._rt.request(self._pending)
            self._pending = {q: Outcomes() for q in self.queues}
            with contextlib.suppress(*_REDIS_DOWN):  # taken back: the loop resends
                self._answer(request)
        self._wait_interruptibly(self.cpu_slots.acquire)

    def _answer(self, request: Request) -> Optional[Claim]:
        """Read a request's replies. If that fails, its outcomes come back to be
        sent again, and leases it may have taken unseen are handed back next time."""
        asked = time.monotonic()
        try:
            claim = request.result()
        except BaseException:
            for queue, earlier in request.outcomes.items():
                self._pending[queue].merge(earlier)
            self._release_all = True
            raise
        waited_s = time.monotonic() - asked
        if waited_s > SLOW_REPLY_S:
            log.warning("worker %s: Redis took %.1f s to answer", self.worker_id, waited_s)
        return claim

    def _prefetch(self) -> None:
        """Quick jobs: write the acks so far and the next claim now, and read the
        reply after running this batch, so Redis works while the jobs run."""
        assert self._rt is not None
        try:
            self._ahead = self._rt.request(self._pending, (self.queues[0], self._batch_n))
        except _REDIS_DOWN:
            self._release_all = True  # part of it may have gone out
            return
        self._pending = {q: Outcomes() for q in self.queues}

    def _idle_quietly(self) -> None:
        """Quiet: settle what is pending once, then only wait to be stopped."""
        if self._ahead is not None or any(self._pending.values()):
            log.info("worker %s: quiet, no longer claiming", self.worker_id)
            self._flush()
            self._pending = {q: Outcomes() for q in self.queues}
        time.sleep(0.2)

    def _wait_for_work(self, timeout_s: float) -> None:
        rt = self._rt
        assert rt is not None
        if not self._wait_interruptibly(lambda: rt.wait_for_work(timeout_s)):
            # the BLPOP reply may still come: never reuse that connection
            rt.client.connection_pool.disconnect()

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
                f"worker {self.worker_id}: Redis at {self.app.redis_url} unavailable for "
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

    def _flush(self) -> None:
        """Settle what is pending (acks, hand-backs) before exiting. While Redis is
        away it keeps trying for FLUSH_PATIENCE_S only, so that a stop is prompt:
        what it still holds then comes back to the queue when its lease expires."""
        rt = self._rt
        assert rt is not None
        deadline = time.monotonic() + FLUSH_PATIENCE_S
        try:
            if self._ahead is not None:
                request, self._ahead = self._ahead, None
                with contextlib.suppress(*_REDIS_DOWN):
                    claim = self._answer(request)
                    if claim is not None:  # prefetched, never started: back to the front in order
                        self._pending[claim.queue].unstarted.extend(claim.reply.ids)
            while rt.may_hold_leases or any(self._pending.values()):
                try:
                    # release_all: a reply lost to a signal may have left leases unseen
                    rt.send(self._pending, release_all=True)
                    self._outage.recovered()
                    return
                except _REDIS_DOWN as exc:
                    delay = self._outage.failed(exc)
                    if time.monotonic() + delay > deadline:
                        log.warning(
                            "worker %s: could not settle its last batch (%s); its jobs come "
                            "back to their queue when its lease expires",
                            self.worker_id, exc,
                        )  # fmt: skip
                        return
                    time.sleep(delay)
        except HardStop:
            log.warning(
                "worker %s: stopped before settling its last batch; its jobs come back to "
                "their queue when its lease expires", self.worker_id,
            )  # fmt: skip

    # -- running a batch ---------------------------------------------------------

    def _run_batch(self, claim: Claim) -> None:
        runnable, broken = claim.reply.decode(self._registry)
        out = self._pending[claim.queue]
        for job_id, reason in broken:
            log.error(
                "job %s of queue %s is broken, quarantined: %s",
                job_id.decode(),
                claim.queue,
                reason,
            )
        out.broken.extend(broken)
        done = out.done.append
        slot = self.slot
        queue_index = self._queue_index[claim.queue]
        alarms = self._alarms
        started = time.perf_counter()
        self._profile.start()
        i = 0
        try:
            for i, (job_id, target, args, kwargs, attempt, env) in enumerate(runnable):  # noqa: B007
                if self.stopping:
                    out.unstarted.extend(job[0] for job in runnable[i:])
                    self.jobs_run += i
                    return
                timeout_s = target.policy.timeout_s
                if slot is not None:
                    slot.start_job(queue_index, job_id, timeout_s)
                try:
                    if timeout_s is not None and alarms:
                        result = self._run_with_timeout(target, args, kwargs, timeout_s)
                    else:
                        result = target.fn(*args, **kwargs)
                except (Exception, JobTimeout) as exc:
                    settle_failure(out, job_id, target, args, kwargs, attempt, env, exc)
                else:
                    if result is None or not isinstance(result, _OUTCOME_TYPES):
                        done(job_id)
                    else:
                        settle_failure(out, job_id, target, args, kwargs, attempt, env, result)
        except BaseException as exc:
            # interrupted mid-job: an operator's hard stop hands the job back without
            # a stall (it is not the job's fault); anything else (SystemExit) counts one
            in_hand = runnable[i][0]
            (out.interrupted if isinstance(exc, HardStop) else out.stalled).append(in_hand)
            out.unstarted.extend(job[0] for job in runnable[i + 1 :])
            self.jobs_run += i + 1
            raise
        finally:
            if slot is not None:
                slot.idle()
        self.jobs_run += len(runnable)
        if runnable:
            batch_s = time.perf_counter() - started
            self._cpu_bound = self._profile.cpu_bound()
            if self.cpu_slots is not None and batch_s >= SHARED_VERDICT_MIN_S:
                self.cpu_slots.note_verdict(self._cpu_bound)
            self._adapt_batch(batch_s / len(runnable))

    def _run_with_timeout(
        self, target: JobDef[Any], args: list[Any], kwargs: dict[str, Any], timeout_s: float
    ) -> Any:
        self._timeout_s = timeout_s
        self._in_job = True
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return target.fn(*args, **kwargs)
        finally:
            self._in_job = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _adapt_batch(self, job_s: float) -> None:
        """Size the next claim to hold about target_batch_s of work: small for
        slow jobs (so siblings share them), up to batch_size for quick ones."""
        self._job_s = job_s if self._job_s == 0.0 else 0.7 * self._job_s + 0.3 * job_s
        wanted = int(self.target_batch_s / max(self._job_s, 1e-7))
        self._batch_n = max(1, min(self.batch_size, wanted, self._batch_n * 2))
