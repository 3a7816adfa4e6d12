"""Smoke test of the peer harness with fastq alone (no peer installed): the pool
drains (straight and through the 1 ms RTT proxy), runs the 5 ms I/O jobs, the
blast enqueues, each counted exactly, and the JSON report says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_peers_quick_run_fastq_only(tmp_path: Path) -> None:
    report, proc = run_bench(
        "peers.run",
        *("--quick", "--only", "fastq", "--workloads", "drain,io,rtt,blast,memory"),
        tmp_path=tmp_path,
        timeout_s=180,
    )
    assert report["options"]["peers"] == ["fastq"]
    assert list(report["versions"]) == ["fastq"]  # nothing else installed or run
    sizes = {"drain": 1000, "io": 200, "rtt": 1000, "blast": 1000, "memory": 1000}
    for workload, n in sizes.items():
        r = report["results"]["fastq"][workload]
        assert (r["ok"], r["runs"], r["duplicates"], r["lost"]) == (True, n, 0, 0), r
    assert report["results"]["fastq"]["drain"]["jobs_s"] > 0
    assert report["results"]["fastq"]["io"]["jobs_s"] > 0
    assert report["results"]["fastq"]["rtt"]["vs_drain"] > 0
    assert report["results"]["fastq"]["rtt"]["proxy_hold"]["chunks"] > 0  # it went through
    assert report["results"]["fastq"]["blast"]["jobs_s"] > 0
    assert report["results"]["fastq"]["memory"]["bytes_per_job"] > 0
    assert report["fastq_vs_best_peer"] == {}  # no peer to compare with
    assert "fastq pool -c 2" in proc.stdout
