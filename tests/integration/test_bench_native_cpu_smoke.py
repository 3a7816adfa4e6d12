"""Smoke test of the native-vs-pure CPU benchmark: both modes run, every job counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchtools import run_bench


@pytest.mark.slow
def test_native_cpu_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("native_cpu", "--quick", tmp_path=tmp_path)
    for role in ("worker", "producer"):
        for mode in ("native", "pure"):
            assert report["median_us"][role][mode] > 0, (role, mode, report)
        assert report["ratio"][role] > 0
    assert "ratio pure/native" in proc.stdout
