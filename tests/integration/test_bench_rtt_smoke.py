"""Smoke test of the RTT benchmark: the delay proxy starts, forwards a real pool's
traffic at 0, 0.5 and 2.5 ms each way, and the figures come out in the JSON report.
The ratios themselves are the benchmark's to report, not asserted."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_rtt_bench_quick_run(tmp_path: Path) -> None:
    args = ["--quick", "--jobs", "1000"]
    report, proc = run_bench("e2e_rtt", *args, tmp_path=tmp_path, timeout_s=180)
    assert set(report["scenarios"]) == {"direct", "proxy0", "rtt1", "rtt5"}
    for link, figures in report["scenarios"].items():
        assert figures["jobs"] == 1000 and figures["jobs_s"] > 0, link
    assert report["scenarios"]["direct"]["proxy_hold"] == {}
    for link, delay_ms in (("proxy0", 0.0), ("rtt1", 0.5), ("rtt5", 2.5)):
        hold = report["scenarios"][link]["proxy_hold"]
        assert hold["delay_ms"] == delay_ms and hold["chunks"] > 0, (link, hold)
        assert hold["p50_ms"] >= delay_ms  # a chunk is never let through early
    assert report["ratios"]["proxy0"] == 1.0
    assert report["targets"]["rtt1_vs_proxy0"]["pass"] in (True, False)
    assert "fastq.ACCELERATED" in proc.stdout
