"""Smoke test of the in-flight benchmark: async pools start, drain, stop with
status 0, and the figures come out in the JSON report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_inflight_bench_quick_run(tmp_path: Path) -> None:
    report, _ = run_bench("inflight", "--quick", "-n", "1000", tmp_path=tmp_path)
    names = ["bare", "blast", "tblast", "anoop", "anoop1", "noop"]
    assert report["options"]["scenarios"] == names
    for name in names:
        assert report["scenarios"][name]["jobs_s"] > 0, report["scenarios"][name]
    assert report["scenarios"]["blast"]["options"] == "--async-jobs 200"
    assert report["scenarios"]["tblast"]["options"] == "--threads 50"
    for target in ("blast_vs_ideal", "tblast_vs_ideal", "anoop_vs_noop", "anoop1_vs_noop"):
        assert report["targets"][target]["value"] > 0, target
    assert report["targets"]["blast_vs_bare"]["value"] > 0
