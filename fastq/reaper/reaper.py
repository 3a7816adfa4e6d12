"""The reaper: returns the jobs of expired leases to the front, buries poison
jobs, promotes due jobs and trims dead sets — one atomic script call per queue per
sweep, and one more per worker whose lease expired — and fires periodic jobs
(:mod:`fastq.reaper.firer`), sleeping until the next slot when that comes first.

Any number of reapers, on any number of hosts, may run at once: each expired
lease is taken by exactly one script call.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Callable, Optional

import redis

from fastq.connection import cluster
from fastq.connection.clock import RedisClock
from fastq.connection.faults import REDIS_ERRORS, Outage, unanswered
from fastq.errors import FastqError
from fastq.monitor.losses import LossWatch, LossWatchThread
from fastq.protocol.contracts import REAP, RELEASE, ReleaseMode
from fastq.reaper.firer import Firer
from fastq.reaper.watch import QueueWatch
from fastq.shm.heartbeat import Heartbeat, HeartbeatSlot
from fastq.worker.roundtrip import PROMOTE_MAX

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.reaper")

_QUEUES_REFRESH_S = 10.0
# After Redis was away (or a sweep took this long: a stall), workers get this long
# to extend their leases before a lapsed one is taken back: their extensions failed
# for the same reason the reaper's calls did, and they are retried within 2 s.
LEASE_GRACE_S = 5.0
SLOW_SWEEP_S = 2.0
# A single Redis is given this long to answer: a slower answer is a stall, which
# the grace above covers.
CALL_TIMEOUT_S = 30.0
# A master of a cluster only this long: the other masters' sweeps wait behind a
# master that does not answer (stopped, gone, or before its failover); one slower
# than SLOW_SWEEP_S has stalled anyway, and gets the same grace after its outage.
CLUSTER_CALL_TIMEOUT_S = SLOW_SWEEP_S
# A master that does not answer at all is tried again this often at most: each try
# keeps the others waiting a call timeout.
SILENT_RETRY_S = 5.0
# How often the reaper settles batches (fastq.producer.batches): a share that ended
# while no worker could tell its batch waits this long at most.
BATCH_EVERY_S = 0.5
# and at most this long after a failure (doubling from BATCH_EVERY_S)
SETTLE_BACKOFF_MAX_S = 16.0


@dataclass
class _NodeSweep:
    """What the reaper knows of one node (a master of a cluster, or the one Redis)."""

    outage: Outage  # its retry_at: when a node that failed is called again
    take_back_after: float = 0.0  # monotonic time; see LEASE_GRACE_S


class Reaper:
    """Sweeps ``queues`` (default: every queue the namespace knows) every
    ``interval_s`` at most, sooner when a lease expires or a job falls due.
    ``limit``: due jobs promoted and expired workers named per call at most (one
    call stays short; a full one is followed by another at once).
    With ``parent_pid`` (a pool's reaper), it stops when its master is gone; with
    ``slot``, it heartbeats to its master like a worker."""

    def __init__(
        self,
        app: App,
        queues: Optional[list[str]] = None,
        *,
        interval_s: float = 1.0,
        limit: int = PROMOTE_MAX,
        handle_signals: bool = True,
        parent_pid: Optional[int] = None,
        slot: Optional[HeartbeatSlot] = None,
    ) -> None:
        self.app = app
        self.fixed_queues = queues
        self.interval_s = interval_s
        self.limit = limit
        self.handle_signals = handle_signals
        self.parent_pid = parent_pid
        self.slot = slot
        # a failure before any sweep (no client, no queue list), and a single Redis':
        # shared by the sweep and the firing, so that an outage is one line each way
        self.outage = Outage("reaper", log)
        # leases and due times are Redis' instants: so are the reaper's sleeps
        self.clock = RedisClock("reaper", log)
        self._nodes: dict[str, _NodeSweep] = {}  # by node name; "" on a single Redis
        self._node_of: dict[str, str] = {}  # queue -> the node that served it last
        self.stopping = False
        self._queues: list[str] = []
        self._queues_read = False
        self._queues_at = 0.0
        self._batches_at = 0.0  # monotonic: when settle_batches runs next
        self._wake = threading.Event()
        # the queues reaped every sweep (those with work), the others probed in bulk
        self.watch = QueueWatch(app.keys, interval_s)
        # the masters of a cluster that did not answer, left alone by the sweep and the firing
        self.silent = cluster.SilentNodes(SILENT_RETRY_S)
        self.firer = Firer(
            app,
            queues,
            who="reaper (periodic jobs)",
            logger=log,
            silent=self.silent,
            clock=self.clock,
            outage_of=lambda name: self._node(name).outage,
        )
        # has Redis lost the queues' data? looked at before the first sweep, then now and then
        self.loss_watch = LossWatch(app.namespace, "reaper", log)

    def stop(self) -> None:
        self.stopping = True
        self._wake.set()

    def _handle_stop_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """Only sets flags; the loop exits at its next turn."""
        self.stop()

    def queues(self, client: redis.Redis) -> list[str]:
        """The queues in Redis to sweep: every shard of a sharded queue. Read again
        every ``_QUEUES_REFRESH_S`` with the reaper's client; while the Redis (the
        master) that keeps the list does not answer, the last list read stands, so
        that the other masters are swept meanwhile.

        Raises:
            a Redis error: the list could not be read, and none was before.
        """
        if time.monotonic() >= self._queues_at:
            try:
                self._queues = self.app.physical_queues_on(client, self.fixed_queues)
            except REDIS_ERRORS:
                if not self._queues_read:
                    raise
                log.debug("reaper: the queue list could not be read; the last one stands")
            else:
                self._queues_read = True
                self.outage.recovered()  # it answered
                self.watch.forget(set(self._queues))
            self._queues_at = time.monotonic() + _QUEUES_REFRESH_S
        return self._queues

    def sweep(self, client: redis.Redis) -> float:
        """One pass over every queue; returns how long the reaper may sleep.

        Each master of a cluster is swept on its own: a master that fails costs the
        others nothing, and its expired leases alone wait for the grace after its
        outage. A failed master is called again when its backoff is due, after the
        masters that answered; one that does not answer at all, every
        ``SILENT_RETRY_S`` at most (by the firing too), so it costs the others one
        call timeout per try, not every sweep."""
        now = time.monotonic()
        waits: list[float] = []
        failed = [name for name, node in self._nodes.items() if node.outage.ongoing]
        failed += [name for name in self._nodes if name in self.silent]
        for name, queues in cluster.by_node(client, self.queues(client), self._leases_key, failed):
            node = self._node(name)
            self._take_over(name, node, queues)
            if node.outage.ongoing:  # the firing's calls failed: the workers' may have too
                node.take_back_after = math.inf
            wait_s = max(node.outage.retry_at - now, self.silent.wait_s(name))
            if wait_s > 0:
                waits.append(wait_s)
                continue
            try:
                wait_s, answered = self._sweep_node(client, name, node, queues)
                waits.append(wait_s)
            except REDIS_ERRORS as exc:
                delay_s = node.outage.failed(exc)
                if name and unanswered(exc):
                    delay_s = self.silent.failed(name, delay_s)
                waits.append(delay_s)
                node.take_back_after = math.inf
            else:
                if node.take_back_after == math.inf:  # after an outage: see LEASE_GRACE_S
                    node.take_back_after = time.monotonic() + LEASE_GRACE_S
                if answered:  # Redis is back only once it answered
                    node.outage.recovered()
                    self.silent.answered(name)
        return min(waits, default=self.interval_s)

    def _take_over(self, name: str, node: _NodeSweep, queues: list[str]) -> None:
        """Queues that moved to node ``name`` from one in trouble (a failover) keep
        a grace: their workers could not extend their leases there either."""
        for queue in queues:
            was = self._node_of.setdefault(queue, name)
            if was != name:
                if self._nodes[was].take_back_after > time.monotonic():
                    grace_ends = time.monotonic() + LEASE_GRACE_S
                    node.take_back_after = max(node.take_back_after, grace_ends)
                self._node_of[queue] = name

    def _leases_key(self, queue: str) -> str:
        return self.app.keys(queue).leases

    def _node(self, name: str) -> _NodeSweep:
        """The sweep state of node ``name`` (``""``: a single Redis, whose outages
        are the reaper's own)."""
        node = self._nodes.get(name)
        if node is None:
            outage = self.outage if name == "" else Outage(f"reaper (master {name})", log)
            node = self._nodes[name] = _NodeSweep(outage)
        return node

    def _sweep_node(
        self, client: redis.Redis, name: str, node: _NodeSweep, queues: list[str]
    ) -> tuple[float, bool]:
        """Sweep ``queues`` (node ``name``'s): reap those with work, and those of the
        others that :class:`QueueWatch` says; returns how long the reaper may sleep,
        and whether Redis was called (a sweep may call nothing: idle queues probed a
        moment ago).

        Raises:
            a Redis error: the first call that failed (the node's later queues wait
                for its next sweep).
        """
        sleep_s = self.interval_s
        app = self.app
        calls = self.clock.readings + self.watch.round_trips
        if queues:  # read now and then (on a cluster, on this master)
            self.clock.now_ms(client, app.keys(queues[0]).leases)
        to_reap = self.watch.to_reap(client, name, queues, probe=node.outage.ongoing)
        answered = bool(to_reap) or self.clock.readings + self.watch.round_trips != calls
        for queue in to_reap:
            keys = app.keys(queue)
            argv = REAP.argv(self.limit, app.dead_max_age_ms, app.dead_max_len)
            called = time.monotonic()
            reaped = REAP.call(client, REAP.keys_for(keys), argv)
            waited_s = time.monotonic() - called
            if waited_s > SLOW_SWEEP_S:  # Redis stalled: so did the workers' extensions
                log.warning("%s: Redis took %.1f s to answer", node.outage.who, waited_s)
                node.take_back_after = time.monotonic() + LEASE_GRACE_S
            self.watch.reaped(queue, reaped)
            promoted, expired = reaped.promoted, reaped.expired_workers
            if time.monotonic() < node.take_back_after:
                expired = []  # a grace after an outage: see LEASE_GRACE_S
                sleep_s = min(sleep_s, 0.5)
            for worker_id in expired:
                released = RELEASE.call(
                    client,
                    RELEASE.keys_for(keys, worker_id),
                    RELEASE.argv(worker_id, ReleaseMode.EXPIRED, app.max_stalls),
                )
                if released.moved:
                    log.warning(
                        "queue %s: the lease of worker %s expired; %d jobs taken back",
                        queue,
                        worker_id,
                        released.moved,
                    )
                released.log_buried(log, queue)
            if promoted:
                log.debug("queue %s: %d due jobs promoted", queue, promoted)
            if len(expired) >= self.limit or promoted >= self.limit:
                sleep_s = 0.0  # more where that came from
            now_ms = self.clock.now_ms()  # Redis' clock: the deadlines are its instants
            for due in (reaped.next_deadline_ms, reaped.next_due_ms):
                if due >= 0:
                    sleep_s = min(sleep_s, max(due - now_ms, 0) / 1000 + 0.005)
        return sleep_s, answered

    def settle_batches(self, client: redis.Redis) -> None:
        """Every ``BATCH_EVERY_S`` at most: tell batches the shares their queues note
        as ended, and finish the closes and firings whose callers died
        (``BatchBook.resume``); forward the links of chains left in the queues'
        outboxes (``ChainBook.resume``). Nothing is lost to a failure: what is due
        stays noted in Redis. A Redis error is raised, once both were tried (the
        caller backs off; the sweep says Redis is away); any other is logged."""
        now = time.monotonic()
        if now < self._batches_at:
            return
        self._batches_at = now + BATCH_EVERY_S
        # the sweep's last list (read, not refreshed: this runs beside the sweep)
        queues = self._queues
        if not self._queues_read:
            queues = self.app.physical_queues_on(client, self.fixed_queues)
        failure: Optional[BaseException] = None
        for what, resume in (
            ("batches", self.app.batch_book.resume),
            ("chains", self.app.chain_book.resume),
        ):
            try:
                done = resume(client, queues)
                if what == "chains" and done:
                    log.info("reaper: forwarded %d links of chains their workers did not", done)
            except REDIS_ERRORS as exc:
                failure = exc
            except FastqError as exc:  # a callback's enqueue refused, say
                log.warning("reaper: %s not settled this turn (%s); again in a moment", what, exc)
            except Exception:  # a bug must not stop the reaper: said in full
                log.exception("reaper: %s not settled this turn; again in a moment", what)
        if failure is not None:
            raise failure

    def fire(self, client: redis.Redis) -> float:
        """Fire the periodic jobs that are due; returns the seconds until the next
        slot. A refusal (a full Redis refuses new jobs) is logged once and retried,
        and never keeps the sweep, which frees memory, from running."""
        return self.firer.fire_due(client)

    def _new_client(self) -> redis.Redis:
        if not self.app.cluster:
            return self.app.new_client(retries=0, socket_timeout_s=CALL_TIMEOUT_S)
        return self.app.new_client(
            retries=0,
            socket_timeout_s=CLUSTER_CALL_TIMEOUT_S,
            connect_timeout_s=CLUSTER_CALL_TIMEOUT_S,
        )

    def run(self) -> None:
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle_stop_signal)
            signal.signal(signal.SIGINT, self._handle_stop_signal)
        beat = Heartbeat(on_orphaned=self.stop, slot=self.slot, parent_pid=self.parent_pid)
        if self.slot is not None:
            self.slot.reset()
        beat.start()
        # from a thread of its own: a node that stalls keeps no other from firing
        # (the first look is made here, before the first sweep)
        losses = LossWatchThread(self.loss_watch, self._new_client, self.queues)
        losses.start()
        # batches and chains from a thread of their own too, with their own client: a
        # master that stalls holds up their calls, never the sweeps and the firing
        settler = SettleThread(self.settle_batches, self._new_client)
        settler.start()
        client: Optional[redis.Redis] = None
        log.info("reaper: sweeping every %.1fs at most", self.interval_s)
        while not self.stopping:
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                log.warning("reaper: its master is gone, stopping")
                break
            fire_s = math.inf
            try:
                if client is None:
                    # in the loop: a cluster's client connects as it is made
                    client = self._new_client()
                # periodic jobs first: a slot is due now, a sweep can wait a few ms
                fire_s = self.fire(client)
                sleep_s = self.sweep(client)
            except REDIS_ERRORS as exc:  # no client, or no queue list: no sweep at all
                sleep_s = self.outage.failed(exc)
                for node in self._nodes.values():
                    node.take_back_after = math.inf  # a grace follows the next sweep
            # no "back" here: only a call that was answered says so (a sweep or a
            # firing that skipped a node in its backoff called nothing)
            self._wake.wait(min(sleep_s, fire_s))
        beat.stop()
        losses.stop()
        settler.stop()
        if client is not None:
            client.close()
        log.info("reaper: stopped")


class SettleThread(threading.Thread):
    """Calls ``settle(client)`` every ``BATCH_EVERY_S``, on a client of its own made
    by ``connect`` (again after a failure)."""

    def __init__(
        self, settle: Callable[[redis.Redis], None], connect: Callable[[], redis.Redis]
    ) -> None:
        super().__init__(name="fastq-reaper-settle", daemon=True)
        self.settle = settle
        self.connect = connect
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(CALL_TIMEOUT_S)

    def run(self) -> None:
        client: Optional[redis.Redis] = None
        wait_s = BATCH_EVERY_S
        while not self._stop_event.wait(wait_s):
            try:
                if client is None:
                    client = self.connect()
                self.settle(client)
                wait_s = BATCH_EVERY_S
            except REDIS_ERRORS as exc:  # Redis away or refusing: back off (no storm)
                log.debug("reaper: batches and chains wait (%s)", exc)
                wait_s = min(wait_s * 2, SETTLE_BACKOFF_MAX_S)
        if client is not None:
            client.close()
