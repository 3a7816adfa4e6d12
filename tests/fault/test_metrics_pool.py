"""``fastq pool --metrics-port``: the master's /metrics counts every job exactly once,
also across a child SIGKILLed and replaced mid-drain."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

import fastq
from tests.support.pool import Pool, noted_runs, wait_until

prometheus_parser = pytest.importorskip("prometheus_client.parser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in prometheus_parser.text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_every_job_once_across_a_killed_child(
    app: fastq.App, pools: Callable[..., Pool], tmp_path: Path
) -> None:
    n = 600
    port = _free_port()
    pool = pools("-c", "2", "--batch", "1", "--metrics-port", str(port))
    pool.wait_children(2)
    wait_until(lambda: _try_scrape(port), 20, "/metrics to answer")
    app.enqueue("hold", [10_000], queue="q")
    app.enqueue_many("note", [(i, 0.002) for i in range(n)], queue="q")
    marker = Path(str(pool.runs_file) + ".hold10000")
    wait_until(lambda: marker.exists() and marker.read_text() != "", 20, "hold to start")
    os.kill(int(marker.read_text()), signal.SIGKILL)  # mid-drain, in the middle of a job
    wait_until(lambda: app.stats("q")["processed"] == n + 1, 60, "the drain")
    assert sorted(noted_runs(pool).elements()) == [*range(n), 10_000]  # each ran once

    metrics = _scrape(port)
    q = (("job", "note"), ("queue", "q"))
    assert metrics[("fastq_jobs_processed_total", q)] == n
    assert metrics[("fastq_jobs_processed_total", (("job", "hold"), ("queue", "q")))] == 1
    assert metrics[("fastq_jobs_failed_total", q)] == 0
    assert metrics[("fastq_jobs_stalled_total", (("job", "other"), ("queue", "q")))] == 1
    assert metrics[("fastq_job_duration_seconds_count", q)] == n
    assert metrics[("fastq_job_latency_seconds_count", q)] == n
    assert metrics[("fastq_children_alive", ())] == 2
    assert metrics[("fastq_queue_jobs", (("queue", "q"), ("state", "ready")))] == 0
    # the registry: this pool's two workers serve q (none of another host here)
    assert metrics[("fastq_queue_workers", (("queue", "q"),))] == 2
    assert pool.stop() == 0


def _try_scrape(port: int) -> bool:
    try:
        _scrape(port)
    except OSError:
        return False
    return True
