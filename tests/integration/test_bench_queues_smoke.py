"""Smoke test of the many-queues benchmark: real burst workers on ``-q d`` and
``-q a,b,c,d`` drain every job, and the figures (the ratio, the order queues were
served in) come out in the JSON report. The ratio is the benchmark's to report."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_queues_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("many_queues", "--quick", "--jobs", "2000", tmp_path=tmp_path)
    one, last, spread = (report["scenarios"][k] for k in ("one", "last", "spread"))
    assert one["queues"] == "d" and last["queues"] == "a,b,c,d"
    assert one["jobs"] == last["jobs"] == spread["jobs"] == 2000
    assert report["targets"]["last_vs_one"]["value"] > 0
    assert report["targets"]["last_vs_one"]["paired"] > 0  # the median of the rounds'
    assert set(spread["served"]) == {"a", "b", "c", "d"}
    assert report["targets"]["served_in_order"]["value"] == ["a", "b", "c", "d"]
    assert "fastq.ACCELERATED" in proc.stdout
