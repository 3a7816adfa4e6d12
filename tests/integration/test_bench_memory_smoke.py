"""Smoke test of the memory benchmark: jobs are queued on a throwaway server and the
bytes per job, the per-key breakdown and an envelope come out in the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_memory_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("memory_per_job", "--quick", "--jobs", "2000", tmp_path=tmp_path)
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
