"""Smoke test of the HTTP enqueue benchmark: it enqueues through a real ``fastq
serve`` and through the Python producer, counts every job in Redis, and reports
throughput, latencies and their ratios in JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_http_enqueue_bench_quick_run(tmp_path: Path) -> None:
    args = ["--jobs", "2000", "--batch", "500", "--singles", "50", "--repeat", "1"]
    figures, proc = run_bench("http_enqueue", *args, tmp_path=tmp_path)
    for mode in ("python", "http"):
        assert figures[mode]["batched_jobs_per_s"] > 0
        assert 0 < figures[mode]["single_p50_ms"] <= figures[mode]["single_p99_ms"]
    assert set(figures["ratios"]) == {"batched", "single_p50", "single_p99"}
    assert "HTTP / Python: batched throughput" in proc.stdout
