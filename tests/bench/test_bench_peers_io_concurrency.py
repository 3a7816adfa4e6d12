"""Smoke test of the peer harness's ``--io-concurrency``: fastq's io jobs run as
``async def`` jobs at that many per child, through the pool's async option."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_peers_io_at_a_given_concurrency(tmp_path: Path) -> None:
    report, _ = run_bench(
        "peers.run",
        *("--quick", "--only", "fastq", "--workloads", "io"),
        *("--io-ms", "20", "--io-concurrency", "50", "--no-chart"),
        tmp_path=tmp_path,
    )
    assert report["options"]["io_concurrency"] == 50
    assert report["options"]["fastq_concurrency"] == 50
    assert report["io_how"]["fastq"] == "100 (async def jobs, pool -c 2 --async-jobs 50)"
    r = report["results"]["fastq"]["io"]
    assert (r["ok"], r["runs"], r["duplicates"], r["lost"]) == (True, 200, 0, 0), r
