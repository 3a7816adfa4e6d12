"""Smoke test of the durable enqueue benchmark: it runs both modes on a master and a
replica and reports throughput, latencies and their ratios in JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_durable_bench_quick_run(tmp_path: Path) -> None:
    args = ["--jobs", "2000", "--batch", "1000", "--singles", "50", "--repeat", "1"]
    figures, proc = run_bench("durable_enqueue", *args, tmp_path=tmp_path)
    for mode in ("min_replicas=0", "min_replicas=1"):
        assert figures[mode]["enqueue_many_jobs_per_s"] > 0
        assert 0 < figures[mode]["enqueue_p50_ms"] <= figures[mode]["enqueue_p99_ms"]
    assert set(figures["ratios"]) == {"throughput", "p50", "p99"}
    assert "min_replicas=1 / min_replicas=0" in proc.stdout
