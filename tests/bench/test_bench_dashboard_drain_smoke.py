"""Smoke test of the dashboard-tabs drain benchmark: both modes drain every job
(checked by the harness), the tabs made their requests, and the ratios are reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_dashboard_drain_bench_quick_run(tmp_path: Path) -> None:
    args = ["--jobs", "2000", "--tabs", "2", "--repeat", "1"]
    figures, proc = run_bench("dashboard_drain", *args, tmp_path=tmp_path)
    assert figures["best"]["no_tabs"]["tab_requests"] == 0
    assert figures["best"]["tabs"]["tab_requests"] >= 2  # each tab's first poll at once
    assert set(figures["ratios"]) == {"jobs_s", "redis_cpu_us_per_job"}
    assert "tabs / no tabs: drain" in proc.stdout
