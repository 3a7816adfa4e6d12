"""Smoke test of the purge benchmark: it runs, purges every job in bounded calls, and
reports its figures in JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_purge_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "purge.json"
    proc = subprocess.run(
        [sys.executable, "bench/purge_cost.py", "--ready", "2500", "--scheduled", "500",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    figures = json.loads(out.read_text())
    assert figures["purged"] == 3000
    assert figures["calls"] == 4  # three full calls of 1,000, and a short one
    assert figures["longest_call_us"] > 0
