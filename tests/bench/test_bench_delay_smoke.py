"""Smoke test of the delayed-jobs benchmark: a real idle pool starts scheduled jobs,
drains a campaign due at once, stops with status 0, and the figures come out in the
JSON report. The targets themselves are the benchmark's to report, not asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_delay_bench_quick_run(tmp_path: Path) -> None:
    args = ["--quick", "--jobs", "200", "--span", "1", "--campaign-jobs", "2000"]
    report, proc = run_bench("e2e_delay", *args, tmp_path=tmp_path)
    spread, campaign = report["scenarios"]["spread"], report["scenarios"]["campaign"]
    assert spread["jobs"] == 200 and campaign["jobs"] == 2000
    assert spread["early"] == 0  # never early: that would be a bug, not a slow machine
    assert 0 <= spread["scheduled_late"] < 200  # a loaded box schedules some late
    late = spread["lateness_ms"]
    assert 0 <= late["min"] <= late["p50"] <= late["p99"] <= late["max"]
    assert campaign["longest_call_us"] > 0 and campaign["script_calls"] > 0
    for name in ("lateness_p99_ms", "lateness_p50_ms", "early", "campaign_longest_call_us"):
        assert report["targets"][name]["pass"] in (True, False)
    assert "fastq.ACCELERATED" in proc.stdout
