"""Smoke test of the memory benchmark: jobs are queued on a throwaway server and the
bytes per job, the per-key breakdown and an envelope come out in the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_memory_bench_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        [
            sys.executable,
            "bench/memory_per_job.py",
            "--quick",
            "--jobs",
            "2000",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    mailing, big = report["payloads"]["mailing"], report["payloads"]["1kb"]
    for r in (mailing, big):
        assert r["jobs"] == 2000
        assert r["bytes_per_job"] > r["call_json_bytes"]  # at least the call itself
        jobs = next(k for name, k in r["keys"].items() if name.endswith(":jobs"))
        ready = next(k for name, k in r["keys"].items() if name.endswith(":ready"))
        assert jobs["entries"] == ready["entries"] == 2000
        assert json.loads(r["envelope"])[0] == "send_email"
    assert big["envelope_bytes"] - mailing["envelope_bytes"] >= 1000
    assert report["targets"]["mailing_vs_lowest_peer"]["pass"] in (True, False)
    assert "fastq.ACCELERATED" in proc.stdout
