"""Smoke test of the in-flight benchmark: async pools start, drain, stop with
status 0, and the figures come out in the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_inflight_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "inflight.json"
    proc = subprocess.run(
        [sys.executable, "bench/inflight.py", "--quick", "-n", "1000", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    names = ["bare", "blast", "tblast", "anoop", "anoop1", "noop"]
    assert report["options"]["scenarios"] == names
    for name in names:
        assert report["scenarios"][name]["jobs_s"] > 0, report["scenarios"][name]
    assert report["scenarios"]["blast"]["options"] == "--concurrency 200"
    assert report["scenarios"]["tblast"]["options"] == "--threads 50"
    for target in ("blast_vs_ideal", "tblast_vs_ideal", "anoop_vs_noop", "anoop1_vs_noop"):
        assert report["targets"][target]["value"] > 0, target
    assert report["targets"]["blast_vs_bare"]["value"] > 0
