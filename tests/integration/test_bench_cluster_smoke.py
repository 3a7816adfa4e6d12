"""Smoke test of the cluster benchmark: real pools drain on a single Redis and on a
3-master cluster (one queue, and three queues on three masters), every job counted
once, the figures in the JSON report. The ratios are the benchmark's to report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_cluster_bench_quick_run(tmp_path: Path) -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed: it creates the Redis Cluster (redis-tools)")
    report, proc = run_bench("cluster_drain", "-n", "2000", tmp_path=tmp_path, timeout_s=180)
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
