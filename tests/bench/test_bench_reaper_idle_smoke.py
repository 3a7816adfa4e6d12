"""Smoke test of the idle-reaper benchmark: a real reaper over a few hundred known
queues, measured for a second; the figures come out in the JSON report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_reaper_idle_bench_quick_run(tmp_path: Path) -> None:
    args = ["--queues", "300", "--busy", "3", "--seconds", "1", "--warmup", "2"]
    report, proc = run_bench("reaper_idle", *args, tmp_path=tmp_path)
    assert (report["queues"], report["busy"]) == (300, 3)
    assert report["commands_per_s"] > 0  # it sweeps: the busy queues at least
    assert 0 <= report["redis_cpu_share"] < 1
    assert "fastq.ACCELERATED" in proc.stdout
