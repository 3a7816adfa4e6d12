"""Smoke test of the many-queues benchmark: real burst workers on ``-q d`` and
``-q a,b,c,d`` drain every job, and the figures (the ratio, the order queues were
served in) come out in the JSON report. The ratio is the benchmark's to report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_queues_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "queues.json"
    proc = subprocess.run(
        [sys.executable, "bench/many_queues.py", "--quick", "--jobs", "2000", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    one, last, spread = (report["scenarios"][k] for k in ("one", "last", "spread"))
    assert one["queues"] == "d" and last["queues"] == "a,b,c,d"
    assert one["jobs"] == last["jobs"] == spread["jobs"] == 2000
    assert report["targets"]["last_vs_one"]["value"] > 0
    assert report["targets"]["last_vs_one"]["paired"] > 0  # the median of the rounds'
    assert set(spread["served"]) == {"a", "b", "c", "d"}
    assert report["targets"]["served_in_order"]["value"] == ["a", "b", "c", "d"]
    assert "fastq.ACCELERATED" in proc.stdout
