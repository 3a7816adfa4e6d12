"""Smoke test of the end-to-end benchmark: it runs, checks itself, writes its JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_e2e_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("e2e_worker", "--quick", tmp_path=tmp_path, timeout_s=60)
    best = report["best_jobs_s"]
    for figure in ("bare_enqueue", "fastq_enqueue", "bare_drain", "fastq_drain"):
        assert best[figure] > 0, (figure, best)
    assert "fastq.ACCELERATED" in proc.stdout
