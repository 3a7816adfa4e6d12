"""Smoke test of the HTTP benchmark: a tiny run serves the HTTP API with uvicorn,
enqueues over it, drains the queue with HTTP worker processes and with a pool, and
reports the ratios in JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_http_bench_quick_run(tmp_path: Path) -> None:
    args = ["--jobs", "1000", "--singles", "50", "--clients", "2", "--claim", "20"]
    figures, proc = run_bench("http", *args, tmp_path=tmp_path)
    workers = figures["http_workers"]
    assert (workers["jobs"], workers["clients"], workers["claim"]) == (1050, 2, 20)
    assert (workers["ack"], workers["wait_s"]) == ("batch", 0.5)
    assert workers["jobs_s"] > 0 and workers["server_cpu_us_per_job"] > 0
    assert workers["redis_cpu_us_per_job"] > 0
    assert figures["pool"]["jobs"] == 1050 and figures["pool"]["jobs_s"] > 0
    for producer in ("python_enqueue", "http_enqueue"):
        assert figures[producer]["batched_jobs_s"] > 0 and figures[producer]["single_jobs_s"] > 0
    assert set(figures["ratios"]) == {
        "http_workers_over_pool",
        "http_batched_over_enqueue_many",
        "http_single_over_enqueue",
    }
    assert "HTTP workers / pool -c 2:" in proc.stdout
    assert "HTTP enqueue / enqueue_many:" in proc.stdout
