"""Smoke test of the Redis CPU benchmark: every variant enqueued and drained (the
bench checks the counts, and that the batch ended), each with its figures and its
ratio to the floor in the JSON report. The figures are the benchmark's to report:
Redis' CPU over a few thousand jobs is a few clock ticks, so none is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_redis_cost_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("redis_cost", "--quick", tmp_path=tmp_path)
    names = ["floor", "plain", "tags", "unique", "batch", "no-records"]
    assert list(report["best"]) == names and list(report["ratios_to_floor"]) == names
    for name in names:
        figures = report["best"][name]
        parts = figures["enqueue_us"] + figures["drain_us"] + figures["fold_us"]
        assert figures["total_us"] == pytest.approx(parts)
        assert min(figures.values()) >= 0
    # the drain ran through the scripts: at least a claim per batch of 100
    assert report["best"]["plain"]["drain_script_calls"] >= 3000 // 100
    assert "× floor" in proc.stdout
