"""Prometheus metrics of a pool (``fastq pool --metrics-port 9100``): the master
serves ``/metrics`` (``prometheus_client``, the ``metrics`` extra) from a thread and
sums the children's blocks of the :class:`~fastq.shm.metrics.MetricsBoard` at scrape
time, with the queues' depths read from Redis."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Iterator

from fastq.protocol.workers import live_entries, workers_per_queue
from fastq.shm.metrics import BUCKETS_S, DURATION_AT, HIST, KINDS, LATENCY_AT, MetricsBoard

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.metrics")

SCRAPE_TIMEOUT_S = 0.5  # a queue-depth read from Redis waits no longer


class Exporter:
    """A pool's metrics: the board its children count on, and the ``/metrics``
    endpoint that serves it from a thread of the master's, between ``start()`` and
    ``stop()`` (a forked child closes its copy of the listening socket).

    Args:
        slots: the heartbeat slots, one block of the board each.
        worker_pids: returns ``{slot: pid}`` of the live worker children.

    Raises:
        RuntimeError: prometheus_client is not installed (said before the pool starts).
    """

    def __init__(
        self,
        app: App,
        slots: int,
        queues: list[str],
        worker_pids: Callable[[], dict[int, int]],
        port: int,
        host: str,
    ) -> None:
        require_prometheus()
        self.board = MetricsBoard(slots, queues, app.registry)
        self.url = f"http://{host}:{port}/metrics"
        self._collector = PoolCollector(self.board, app, worker_pids)
        self._port, self._host = port, host
        self._server: Any = None

    def start(self) -> None:
        self._server = serve(self._collector, self._port, self._host)

    def close_in_child(self) -> None:
        if self._server is not None:
            self._server.socket.close()  # the master's listening socket

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class PoolCollector:
    """Reads a pool's metrics at scrape time (a ``prometheus_client`` collector).

    Args:
        board: the children's counts.
        app: its Redis, read for the queues' depths (with a short timeout).
        children: returns ``{slot: pid}`` of the live worker children.
    """

    def __init__(self, board: MetricsBoard, app: App, children: Any) -> None:
        self.board = board
        self.app = app
        self.children = children
        self._client: Any = None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        board = self.board
        totals = board.totals()
        labels = ["queue", "job"]
        counters = [
            CounterMetricFamily(
                f"fastq_jobs_{kind}", f"Jobs {kind} (runs, by queue and job)", labels=labels
            )
            for kind in KINDS
        ]
        duration = HistogramMetricFamily(
            "fastq_job_duration_seconds", "Job run time", labels=labels
        )
        latency = HistogramMetricFamily(
            "fastq_job_latency_seconds", "From enqueue to start", labels=labels
        )
        for queue, job, cell in board.cells(totals):
            for kind, family in enumerate(counters):
                family.add_metric([queue, job], cell[kind])
            for at, hist in ((DURATION_AT, duration), (LATENCY_AT, latency)):
                counts = cell[at : at + HIST - 1]
                if not any(counts):
                    continue
                running, buckets = 0.0, []
                for bound, count in zip(BUCKETS_S, counts):
                    running += count
                    buckets.append(("+Inf" if bound == math.inf else repr(bound), running))
                hist.add_metric([queue, job], buckets, cell[at + HIST - 1])
        yield from counters
        yield duration
        yield latency
        children = self.children()
        alive = GaugeMetricFamily("fastq_children_alive", "Worker children alive")
        alive.add_metric([], len(children))
        yield alive
        rss = GaugeMetricFamily(
            "fastq_child_rss_bytes", "Resident memory of a worker child", labels=["slot"]
        )
        import psutil

        for slot, pid in sorted(children.items()):
            try:
                rss.add_metric([str(slot)], psutil.Process(pid).memory_info().rss)
            except psutil.Error:
                continue  # gone meanwhile
        yield rss
        yield from self._depths()

    def _depths(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        depth = GaugeMetricFamily(
            "fastq_queue_jobs", "Jobs in a queue, by state (from Redis)", labels=["queue", "state"]
        )
        up = GaugeMetricFamily("fastq_redis_up", "1 if Redis answered the last scrape")
        workers = GaugeMetricFamily(
            "fastq_queue_workers",
            "Worker processes serving a queue, every host's (the registry)",
            labels=["queue"],
        )
        try:
            if self._client is None:
                self._client = self.app.new_client(
                    retries=0, socket_timeout_s=SCRAPE_TIMEOUT_S, connect_timeout_s=SCRAPE_TIMEOUT_S
                )
            for queue in self.board.queues:
                stats = self.app.stats_on(self._client, queue)
                for state in ("ready", "inflight", "scheduled", "dead", "broken"):
                    depth.add_metric([queue, state], stats.get(state, 0))
            serving = workers_per_queue(live_entries(self._client, self.app.namespace))
            for queue in self.board.queues:
                workers.add_metric([queue], serving.get(queue, 0))
            up.add_metric([], 1)
        except Exception as exc:  # a scrape never fails for Redis: the gauge says it
            log.warning("metrics: queue depths unavailable: %s", exc)
            up.add_metric([], 0)
        yield depth
        yield workers
        yield up


def serve(collector: PoolCollector, port: int, host: str) -> Any:
    """Serve ``/metrics`` from a thread; returns the server (closed by children).

    Raises:
        RuntimeError: prometheus_client is not installed.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise RuntimeError(
            "--metrics-port needs prometheus_client: pip install 'fastq[metrics]'"
        ) from None
    registry = CollectorRegistry()
    registry.register(collector)
    server, _ = start_http_server(port, host, registry=registry)
    return server


def require_prometheus() -> None:
    """Raise RuntimeError now if ``--metrics-port`` cannot be served."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "--metrics-port needs prometheus_client: pip install 'fastq[metrics]'"
        ) from None
