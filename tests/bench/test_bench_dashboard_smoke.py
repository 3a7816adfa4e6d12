"""Smoke test of the dashboard pages' benchmark: every page answers 200 over a
filled Redis, and each gets its median and slowest time in the JSON report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_dashboard_pages_bench_quick_run(tmp_path: Path) -> None:
    args = ["--queues", "3", "--jobs", "3000", "--scheduled", "5", "--requests", "2"]
    figures, proc = run_bench("dashboard_pages", *args, tmp_path=tmp_path)
    pages = figures["pages"]
    assert len(pages) == 10 and "/" in pages and "/queues/q000?state=dead" in pages
    for page in pages.values():
        assert 0 < page["p50_ms"] <= page["max_ms"]
    assert "filled in" in proc.stdout
