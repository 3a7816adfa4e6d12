"""Smoke test of the native-vs-pure CPU benchmark: both modes run, every job counted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_native_cpu_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    proc = subprocess.run(
        [sys.executable, "bench/native_cpu.py", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    for role in ("worker", "producer"):
        for mode in ("native", "pure"):
            assert report["median_us"][role][mode] > 0, (role, mode, report)
        assert report["ratio"][role] > 0
    assert "ratio pure/native" in proc.stdout
