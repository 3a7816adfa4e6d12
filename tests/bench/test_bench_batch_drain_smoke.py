"""Smoke test of the batch benchmark: warm pools drain a small blast with and without
a batch, the batch's callback runs once with the counts, and the figures come out
in the JSON report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_batch_drain_bench_quick_run(tmp_path: Path) -> None:
    args = ["-n", "3000", "--repeat", "1", "--cost-jobs", "2000", "--no-progress"]
    report, proc = run_bench("batch_drain", *args, tmp_path=tmp_path)
    (plain,), (batched,) = report["runs"]["plain"], report["runs"]["batch"]
    assert plain["jobs"] == batched["jobs"] == 3000
    assert plain["jobs_s"] > 0 and batched["jobs_s"] > 0 and report["ratio"] > 0
    # the batch ended, and called back, once its jobs had run
    assert 0 < batched["ended_after_s"] <= batched["called_back_after_s"]
    # a queued job of a batch: its entry in the queue's batched hash, tens of bytes
    assert 20 < report["queued_keyspace_bytes_per_job"] < 200
    assert report["queued_batch_key_bytes_per_job"] > 20
    # once it ended: its hash and index entry (a few hundred bytes), nothing per job
    assert report["drained_batch_key_bytes"] < 5000
    for label in ("plain", "batch"):
        figures = report["script_cost"][label]
        assert figures["enqueue_us"] > 0 and figures["claim_us"] > 0 and figures["ack_us"] > 0
    assert "batch / plain" in proc.stdout and "fastq.ACCELERATED" in proc.stdout
