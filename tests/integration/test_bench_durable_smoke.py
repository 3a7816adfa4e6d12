"""Smoke test of the durable enqueue benchmark: it runs both modes on a master and a
replica and reports throughput, latencies and their ratios in JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_durable_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "durable.json"
    proc = subprocess.run(
        [sys.executable, "bench/durable_enqueue.py", "--jobs", "2000", "--batch", "1000",
         "--singles", "50", "--repeat", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    figures = json.loads(out.read_text())
    for mode in ("min_replicas=0", "min_replicas=1"):
        assert figures[mode]["enqueue_many_jobs_per_s"] > 0
        assert 0 < figures[mode]["enqueue_p50_ms"] <= figures[mode]["enqueue_p99_ms"]
    assert set(figures["ratios"]) == {"throughput", "p50", "p99"}
    assert "min_replicas=1 / min_replicas=0" in proc.stdout
