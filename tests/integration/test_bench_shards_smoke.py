"""Smoke test of the sharded-queue benchmark: burst workers on a queue of 1 and of 4
shards drain every job, each shard its share, and the figures come out in the JSON
report. The ratio is the benchmark's to report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_shards_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "shards.json"
    proc = subprocess.run(
        [sys.executable, "bench/sharded_queue.py", "--quick", "--jobs", "4000", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    one, sharded = report["scenarios"]["one"], report["scenarios"]["sharded"]
    assert (one["shards"], sharded["shards"]) == (1, 4)
    assert one["processed_per_shard"] == [4000]
    assert sharded["processed_per_shard"] == [1000] * 4
    assert report["targets"]["sharded_vs_one"]["value"] > 0
    assert "fastq.ACCELERATED" in proc.stdout
