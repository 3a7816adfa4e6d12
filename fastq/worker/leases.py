"""A worker's lease keeper: a thread that extends the leases of the jobs it holds,
and sends the progress its jobs reported, so that a long job is never handed to
another worker while its own is alive."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

import redis

from fastq.connection import cluster
from fastq.connection.faults import REDIS_ERRORS, Outage, classify, unanswered
from fastq.context import PROGRESS_FLUSH_S, ProgressBuffer
from fastq.monitor.losses import LossWatch
from fastq.protocol.contracts import EXTEND, is_stale
from fastq.protocol.keys import QueueKeys
from fastq.protocol.results import send_progress

log = logging.getLogger("fastq.worker")


# A progress hash no worker wrote to for this many leases expires (its jobs' workers died).
PROGRESS_TTL_LEASES = 10

# A failed extension is tried again within this.
RETRY_MAX_S = 2.0


class LeaseKeeper(threading.Thread):
    """Extends the lease of every job a worker holds, in one call per queue every
    quarter of a lease, so a 4-hour job is never handed to another worker while
    its own is alive.

    Its calls time out well within a lease, and a failed extension is tried again
    within a second or two (a Redis stall of 40 s leaves a 60 s lease standing:
    the deadline is always at least three quarters of a lease ahead when it
    starts). Nothing Redis answers stops the thread; an outage is logged once.

    It also sends the running jobs' progress reports (``progress``), at most once
    every ``PROGRESS_FLUSH_S`` and only when there are any, and looks whether Redis
    lost the queues' data (``watch``, every ``watch.check_s``).

    Its extensions carry the worker's epoch (``epoch()``, the round trip's): one
    sent before the worker gave up on a request and landing after is refused.
    """

    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        worker_id: str,
        keys: list[QueueKeys],
        lease_ms: int,
        progress: Optional[ProgressBuffer] = None,
        watch: Optional[LossWatch] = None,
        epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__(name="fastq-leases", daemon=True)
        # made at the first extension or look at the markers (``watch``, 2 s in), not at
        # start: a child's start-up (paid 32 times over by ``pool -c 32``) does not
        # build a client it won't use yet
        self.connect = connect
        self.client: Optional[redis.Redis] = None
        self.worker_id = worker_id
        self.keys = keys
        self.lease_ms = lease_ms
        self.extend_s = lease_ms / 4000
        self.progress = progress
        self.watch = watch
        self.epoch = epoch
        self.progress_ttl_ms = max(PROGRESS_TTL_LEASES * lease_ms, 60_000)
        self._keys_by_queue = {k.queue: k for k in keys}
        self._extend_keys = {k.queue: EXTEND.keys_for(k, worker_id) for k in keys}
        self._silent_nodes: set[str] = set()  # the nodes that did not answer the last round
        self.outage = Outage(f"worker {worker_id} (leases)", log)
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        wait_s = self.extend_s
        next_extend = time.monotonic() + wait_s
        tick_s = wait_s if self.progress is None else min(wait_s, PROGRESS_FLUSH_S)
        while not self._stop_event.wait(min(tick_s, max(next_extend - time.monotonic(), 0))):
            if self.progress:
                self.send_progress()
            if self.watch is not None:
                self.watch.tick(self._connected, lambda _: self._keys_by_queue)
            if time.monotonic() < next_extend:
                continue
            retry_s = self.extend_leases()
            wait_s = self.extend_s if retry_s is None else min(retry_s, RETRY_MAX_S, self.extend_s)
            next_extend = time.monotonic() + wait_s
        if self.client is not None:
            self.client.close()

    def send_progress(self) -> None:
        """Write the latest report of each running job, in one pipeline per node (one
        on a single Redis); the reports a node failed to take are kept for the next
        beat."""
        assert self.progress is not None
        with self.progress.sending:
            latest = self.progress.take()
            if not latest:
                return
            try:
                client = self._connected()
                by_node = self._by_node(client, [self._keys_by_queue[q] for q in latest])
            except REDIS_ERRORS as exc:
                self.progress.give_back(latest)
                log.warning("worker %s: could not send progress (%s)", self.worker_id, exc)
                return
            for _, node_keys in by_node:
                try:
                    send_progress(client, node_keys, latest, self.progress_ttl_ms)
                except REDIS_ERRORS as exc:
                    self.progress.give_back({k.queue: latest[k.queue] for k in node_keys})
                    log.warning("worker %s: could not send progress (%s)", self.worker_id, exc)

    def extend_leases(self) -> Optional[float]:
        """One extension of every queue's lease; None when done, else how soon to
        try again.

        Each queue is extended on its own: a call that fails costs the other queues
        nothing. A node (a master of a cluster) that does not answer is called once
        a round, after the nodes that answered last round, so each costs the others
        one call timeout at most and only in the round it falls silent."""
        try:
            client = self._connected()
            by_node = self._by_node(client, self.keys)
        except REDIS_ERRORS as exc:
            return self._extension_failed(exc)
        argv = EXTEND.argv(self.worker_id, self.lease_ms, self.epoch())
        fault: Optional[BaseException] = None
        retry_s: Optional[float] = None
        silent: set[str] = set()
        for node, node_keys in by_node:
            for k in node_keys:
                try:
                    EXTEND.call(client, self._extend_keys[k.queue], argv)
                except REDIS_ERRORS as exc:
                    if is_stale(exc):
                        # this worker's id had a newer epoch before (a process of the
                        # same id): its loop moves past it at its next round trip
                        retry_s = RETRY_MAX_S
                        continue
                    if classify(exc) is None:
                        retry_s = self._extension_failed(exc)
                        continue
                    fault = fault or exc
                    if unanswered(exc):
                        silent.add(node)
                        break  # its other queues would wait as long, for nothing
        self._silent_nodes = silent
        if fault is None:
            self.outage.recovered()
            return retry_s
        return self._extension_failed(fault)

    def _extension_failed(self, exc: BaseException) -> float:
        try:
            return self.outage.failed(exc)
        except REDIS_ERRORS:  # not Redis' fault: say so loudly, and keep extending
            log.exception("worker %s: extending its leases failed", self.worker_id)
            return RETRY_MAX_S

    def _connected(self) -> redis.Redis:
        if self.client is None:
            self.client = self.connect()
        return self.client

    def _by_node(
        self, client: redis.Redis, keys: list[QueueKeys]
    ) -> list[tuple[str, list[QueueKeys]]]:
        """``keys`` by the node serving their queue (all in one on a single Redis),
        the nodes that did not answer the last extension last."""
        return cluster.by_node(client, keys, lambda k: k.leases, last=self._silent_nodes)
