"""Smoke test of the sharded-queue benchmark: burst workers on a queue of 1 and of 4
shards drain every job, each shard its share, and the figures come out in the JSON
report. The ratio is the benchmark's to report."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_shards_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("sharded_queue", "--quick", "--jobs", "4000", tmp_path=tmp_path)
    one, sharded = report["scenarios"]["one"], report["scenarios"]["sharded"]
    assert (one["shards"], sharded["shards"]) == (1, 4)
    assert one["processed_per_shard"] == [4000]
    assert sharded["processed_per_shard"] == [1000] * 4
    assert report["targets"]["sharded_vs_one"]["value"] > 0
    assert "fastq.ACCELERATED" in proc.stdout
