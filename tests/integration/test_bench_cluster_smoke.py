"""Smoke test of the cluster benchmark: real pools drain on a single Redis and on a
3-master cluster (one queue, and three queues on three masters), every job counted
once, the figures in the JSON report. The ratios are the benchmark's to report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_cluster_bench_quick_run(tmp_path: Path) -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed: it creates the Redis Cluster (redis-tools)")
    out = tmp_path / "cluster.json"
    proc = subprocess.run(
        [sys.executable, "bench/cluster_drain.py", "-n", "2000", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"single", "cluster1", "cluster3", "sharded3"}
    three = results["cluster3"][0]
    assert len(three["queues"]) == 3 and all(r[0]["jobs"] == 2000 for r in results.values())
    # every master took claims and acks: the round trip fanned out to all three
    assert len(three["evalsha_per_node"]) == 3 and min(three["evalsha_per_node"]) > 0
    assert "cluster3/single" in proc.stdout
    # one queue of three shards, one on each master: every master served it
    sharded = results["sharded3"][0]
    assert len(sharded["queues"]) == 1 and min(sharded["evalsha_per_node"]) > 0
