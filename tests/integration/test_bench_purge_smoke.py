"""Smoke test of the purge benchmark: it runs, purges every job in bounded calls, and
reports its figures in JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_purge_bench_quick_run(tmp_path: Path) -> None:
    args = ["--ready", "2500", "--scheduled", "500"]
    figures, _ = run_bench("purge_cost", *args, tmp_path=tmp_path)
    assert figures["purged"] == 3000
    assert figures["calls"] == 4  # three full calls of 1,000, and a short one
    assert figures["longest_call_us"] > 0
