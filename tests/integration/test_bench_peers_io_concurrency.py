"""Smoke test of the peer harness's ``--io-concurrency``: fastq's io jobs run as
``async def`` jobs at that many per child, through the pool's async option."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_peers_io_at_a_given_concurrency(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [
            sys.executable,
            *("bench/peers/run.py", "--quick", "--only", "fastq", "--json", str(out)),
            *("--workloads", "io", "--io-ms", "20", "--io-concurrency", "50", "--no-chart"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(out.read_text())
    assert report["options"]["io_concurrency"] == 50
    assert report["options"]["fastq_concurrency"] == 50
    assert report["io_how"]["fastq"] == "100 (async def jobs, pool -c 2 --concurrency 50)"
    r = report["results"]["fastq"]["io"]
    assert (r["ok"], r["runs"], r["duplicates"], r["lost"]) == (True, 200, 0, 0), r
