"""Smoke test of the groups' cost benchmark: a small drain plain and grouped (the
bench checks that every job was claimed and acknowledged), and a small group behind
a big one. Its figures are the benchmark's to report: none is asserted but the one
the design promises, that the small group's first job comes in the first claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_group_cost_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench(
        "group_cost",
        *("-n", "2000", "--groups", "20", "--batches", "100", "--repeat", "1", "--big", "5000"),
        tmp_path=tmp_path,
    )
    (row,) = report["rows"]
    assert row["batch"] == 100
    for name in ("enqueue_plain_us", "enqueue_grouped_us", "drain_plain_us", "drain_grouped_us"):
        assert row[name] > 0
    assert report["behind_big"]["claim"] == 1
    assert "plain/grouped" in proc.stdout
