"""One worker process: its parts, built before any fork; its life cycle after it
(signals, heartbeat, connections, shards: ``init_process``), its run, and its stop.

What it does between start and stop is its claim loop (:mod:`fastq.worker.loop`),
an object of its own that it builds once the parts are open.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

from fastq import logs
from fastq.circuit import Circuits
from fastq.connection.checks import check_redis
from fastq.connection.faults import REDIS_ERRORS, Outage
from fastq.connection.url import mask_url
from fastq.context import ProgressBuffer
from fastq.errors import FastqError
from fastq.monitor.announcer import Announcer, process_fields
from fastq.monitor.losses import Held, LossWatch
from fastq.protocol.keys import validate_queue_name
from fastq.protocol.outcomes import Outcomes
from fastq.ratelimit import KeyGate
from fastq.runners.factory import build_runners
from fastq.runners.sync import HardStop
from fastq.shm.cpuslots import CpuGovernor, CpuSlots
from fastq.shm.heartbeat import Heartbeat, HeartbeatSlot
from fastq.shm.metrics import ChildMetrics
from fastq.worker.atmostonce import AtMostOnce
from fastq.worker.leases import LeaseKeeper
from fastq.worker.loop import ClaimLoop
from fastq.worker.mates import LongJobWatch
from fastq.worker.options import WorkerOptions
from fastq.worker.pump import Pump
from fastq.worker.queues import QueueLayout
from fastq.worker.roundtrip import RoundTrip
from fastq.worker.sizer import QueueSizers
from fastq.worker.unknown import UnknownJobs

if TYPE_CHECKING:
    from fastq.app import App
    from fastq.job import JobDef

__all__ = ["HardStop", "RedisGaveUp", "Worker", "WorkerOptions", "default_worker_id"]

log = logging.getLogger("fastq.worker")

# The lease keeper's calls time out within this (and within a tenth of a lease).
LEASE_CALL_TIMEOUT_S = 2.0
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
        options: how it claims and runs jobs (:class:`fastq.worker.options.WorkerOptions`);
            keywords named as its fields change single options
            (``Worker(app, ["q"], burst=True)``).
        worker_id: its name in Redis and in the logs (default: host, pid, random).
        handle_signals: install handlers (SIGTERM/SIGINT: graceful, then hard
            stop; SIGUSR1: quiet; SIGALRM: job timeouts). Job ``timeout_s`` is
            enforced only with them.
        slot: a master's heartbeat slot (set by ``fastq pool``).
        metrics: where it counts its jobs for the master's /metrics (``fastq pool
            --metrics-port``).
        parent_pid: stop when the parent process changes (the master died).
        cpu_slots: a pool's CPU slots: taken while this worker's batches are
            CPU-bound, so an oversubscribed host does not time-slice itself (not
            taken by a worker with an event loop: see ``async_jobs``).
    """

    def __init__(
        self,
        app: App,
        queues: list[str],
        options: Optional[WorkerOptions] = None,
        *,
        worker_id: Optional[str] = None,
        handle_signals: bool = True,
        slot: Optional[HeartbeatSlot] = None,
        metrics: Optional[ChildMetrics] = None,
        parent_pid: Optional[int] = None,
        cpu_slots: Optional[CpuSlots] = None,
        **changes: Any,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for q in queues:
            validate_queue_name(q)
        self.options = options = (options or WorkerOptions()).with_changes(**changes)
        self.app = app
        self.queues = list(dict.fromkeys(queues))
        self.lease_ms = int(options.lease_s * 1000)
        self.worker_id = worker_id
        self.handle_signals = handle_signals
        self.slot = slot
        self.parent_pid = parent_pid
        # a batch holds ~target_batch_s of work, and well under a lease
        target_batch_s = min(options.target_batch_s, options.lease_s / 4)
        self.sizers = QueueSizers(self.queues, options.batch_size, target_batch_s)
        self.governor = CpuGovernor(cpu_slots)
        self.progress = ProgressBuffer()
        self.runner, self.slots = build_runners(
            self,
            lambda: str(self.worker_id),
            app.registry.values(),
            app.hooks,
            slot=slot,
            progress=self.progress,
            metrics=metrics,
            concurrency=options.async_jobs,
            threads=options.threads,
            max_claim=options.batch_size,
            on_stuck=self._recycle_stuck,
        )
        if not self.slots.may_claim_ahead:
            # its jobs are not run to completion, so their batches are not measured:
            # they are taken to wait, and its worker takes no CPU slot
            self.governor = CpuGovernor(None)
        self.stopping = False
        self.quiet = False
        # the queues' shards, from Redis' record: set in init_process
        self.layout = QueueLayout(self.queues, {})
        self._registry: dict[str, JobDef[Any]] = {}
        self._outage = Outage("worker", log)  # named in init_process
        self._rt: Optional[RoundTrip] = None
        self._pump: Optional[Pump] = None
        self._at_most_once: Optional[AtMostOnce] = None  # set if the app has such jobs
        self._heartbeat: Optional[Heartbeat] = None
        self._leases: Optional[LeaseKeeper] = None
        self._long_jobs: Optional[LongJobWatch] = None
        self._loop: Optional[ClaimLoop] = None  # while it runs
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
            "worker %s: %s, stopping after the job in hand (a second Ctrl-C or SIGTERM "
            "interrupts it and hands it back)",
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
        # fork, a slow disk) answers in the end. A request given up on may still be
        # run by Redis later: the round trip's epoch makes its calls refused then.
        socket_timeout_s = self.lease_ms / 1000 + self.options.idle_timeout_s
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
        gate = KeyGate(lambda: rt.client, self.app.namespace, layout.rate_home)
        circuits = Circuits(lambda: rt.client, self.app.namespace)
        self.runner.gate, self.runner.circuits = gate, circuits

        def settle_keys(queue: str, out: Outcomes) -> None:
            if out.rests:
                gate.rest(queue, out.rests)
            if out.circuit_outcomes:
                circuits.report(out.circuit_outcomes)

        self._pump = Pump(
            rt,
            layout.physical,
            self._outage,
            self.slot,
            on_acked=lambda queue, reply: self.app.after_ack(
                rt.client, queue, reply, f"worker {self.worker_id}"
            ),
            settle_keys=settle_keys,
        )
        if any(job.at_most_once for job in self._registry.values()):
            self._at_most_once = AtMostOnce(rt, self.runner, f"worker {self.worker_id}")
        # its queues' markers noted before it claims: a loss from then on is noticed
        watch = LossWatch(self.app.namespace, f"worker {self.worker_id}", log, held=self._held)
        watch.check_now(lambda: rt.client, lambda _: layout.physical)
        call_timeout_s = min(LEASE_CALL_TIMEOUT_S, self.lease_ms / 10_000)
        after_s = self.options.hand_back_after_s
        self._leases = LeaseKeeper(
            lambda: self.app.new_client(
                retries=0, socket_timeout_s=call_timeout_s, connect_timeout_s=call_timeout_s
            ),
            str(self.worker_id),
            list(rt.keys.values()),
            self.lease_ms,
            self.progress,
            watch,
            epoch=lambda: rt.epoch,
        )
        self._leases.start()
        if after_s:
            self._long_jobs = LongJobWatch(
                self.runner, self.slots, self._pump, str(self.worker_id), after_s
            )
            self._long_jobs.start()

    def _held(self) -> Held:
        """What it holds (read from the lease keeper's thread): see ``Pump.held``."""
        return {} if self._pump is None else self._pump.held()

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
        # alone, it announces itself in the worker registry (a pool's master does it
        # for its children)
        announcer = Announcer(
            lambda: self.app.new_client(retries=0, socket_timeout_s=2.0, connect_timeout_s=2.0),
            self.app.namespace,
            str(self.worker_id),
            self._announced,
            "worker",
        )
        announcer.start()
        try:
            self.run_loop()
        finally:
            announcer.stop()

    def _announced(self) -> dict[str, Any]:
        """This worker's entry in the worker registry (:mod:`fastq.protocol.workers`)."""
        app, pid = self.app, os.getpid()
        entry = process_fields("worker", pid, self.queues, app.redis_url, app.namespace)
        # what it runs now is known to a pool's children only (their heartbeat slots)
        child = {"kind": "worker", "pid": pid, "started_at": entry["started_at"], "state": None}
        child["jobs_done"] = self.jobs_run
        return dict(entry, id=str(self.worker_id), children=[child])

    def _unknown_job_grace_s(self) -> float:
        """The worker's ``unknown_job_grace_s``, else its app's."""
        grace_s = self.options.unknown_job_grace_s
        return self.app.unknown_job_grace_s if grace_s is None else grace_s

    def run_loop(self) -> None:
        """``run()`` after ``init_process()``: the master boots them apart to tell
        a boot error from a crash."""
        log.info(
            "worker %s: Redis %s, namespace %s, queues %s, jobs %s",
            self.worker_id,
            mask_url(self.app.redis_url),
            self.app.namespace,
            ",".join(
                q if len(names) == 1 else f"{q} ({len(names)} shards)"
                for q, names in zip(self.queues, self.layout.shards)
            ),
            ",".join(sorted(self._registry)) or "none",
        )
        assert self._rt is not None and self._pump is not None
        assert self._heartbeat is not None and self._leases is not None
        self._loop = loop = ClaimLoop(
            self,
            self.options,
            worker_id=str(self.worker_id),
            layout=self.layout,
            sizers=self.sizers,
            governor=self.governor,
            slots=self.slots,
            runner=self.runner,
            rt=self._rt,
            pump=self._pump,
            at_most_once=self._at_most_once,
            registry=self._registry,
            slot=self.slot,
            wait_interruptibly=self._wait_interruptibly,
            wait_for_redis=self._wait_for_redis,
            unknown=UnknownJobs(self._unknown_job_grace_s(), str(self.worker_id)),
        )
        try:
            loop.run()
            loop.drain()
        except HardStop as stop:
            # the operator's second signal: the job in hand goes back, not counted a stall
            log.info("worker %s: %s again, interrupted", self.worker_id, stop)
        finally:
            loop.finish()
            self._leases.stop()
            if self._long_jobs is not None:
                self._long_jobs.stop()
            self._heartbeat.stop()
            self._rt.close()
            self.governor.close()
            self.app.hooks.run_worker_stop()
        log.info("worker %s: stopped after %d jobs", self.worker_id, self.jobs_run)

    @property
    def jobs_run(self) -> int:
        """The jobs it ran (to an outcome) so far."""
        return 0 if self._loop is None else self._loop.jobs_run

    # -- waits that a stop signal cuts short ---------------------------------------

    def _wait_interruptibly(self, wait: Callable[[], object]) -> bool:
        """Block in ``wait`` (nothing running meanwhile), which a stop signal cuts
        short: then the worker is stopping and this returns False."""
        try:
            self._waiting = True  # from here a stop signal raises HardStop
            if self.stopping:  # a signal came since the loop last looked
                return False
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
        patience = self.options.patience_s
        if patience is not None and time.monotonic() - self._outage.since > patience:
            raise RedisGaveUp(
                f"worker {self.worker_id}: Redis at {mask_url(self.app.redis_url)} unavailable for "
                f"{patience:g} s, giving up: {exc}"
            ) from None
        self._wait_interruptibly(lambda: time.sleep(delay))
