"""Smoke test of the rate-limit benchmark: with tiny numbers it runs, drains every job
through a real pool under the limit, and reports its figures in JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_rate_limit_bench_tiny_run(tmp_path: Path) -> None:
    args = ["--cases", "40", "--rate", "20", "--pools", "1", "-c", "2"]
    report, _ = run_bench("rate_limit", *args, tmp_path=tmp_path, timeout_s=180)
    [case] = report["cases"]
    assert (case["jobs"], case["rate"], case["burst"]) == (40, 20, 1)
    # not a speed but the limit: 40 starts span at least the intervals the limit puts
    # between their claims, less what the 2 workers may hold claimed but not started
    # (one job each at burst 1), less one for rounding: (40 - 1 - 2 - 1) / 20 s
    assert case["start_span_s"] >= (40 - 1 - 2 - 1) / 20
    assert case["elapsed_s"] > 0 and case["script_calls_per_job"] >= 1
