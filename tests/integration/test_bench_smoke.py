"""Smoke test of the end-to-end benchmark: it runs, checks itself, writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_e2e_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "e2e.json"
    proc = subprocess.run(
        [sys.executable, "bench/e2e_core.py", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    best = report["best_jobs_s"]
    for figure in ("bare_enqueue", "fastq_enqueue", "bare_drain", "fastq_drain"):
        assert best[figure] > 0, (figure, best)
    assert "fastq.ACCELERATED" in proc.stdout
