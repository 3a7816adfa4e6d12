"""Smoke test of the enqueue cost benchmark: every shape enqueued by both scripts, a
figure for each in the JSON report. The figures are the benchmark's to report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_enqueue_cost_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench(
        "enqueue_cost", "-n", "2000", "--repeat", "1", "--against", "HEAD", tmp_path=tmp_path
    )
    shapes = [row["shape"] for row in report["rows"]]
    assert shapes == ["positional", "kwargs+priority", "positional+2 tags"]
    for row in report["rows"]:
        assert set(row["us_per_job"]) == {"now", "HEAD"} and row["ratio"] > 0
        assert min(row["min_us_per_job"].values()) > 0
    assert "kwargs+priority" in proc.stdout
