"""Smoke test of the records benchmark: a small drain with records on and off, the
bytes per record in the JSON report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bench import run_bench


@pytest.mark.slow
def test_records_memory_bench_quick_run(tmp_path: Path) -> None:
    report, proc = run_bench("records_memory", "--jobs", "2000", tmp_path=tmp_path)
    assert report["on"]["kept"] == 2000
    assert report["off"]["kept"] == 0
    # an id, a short record and a hash entry: tens of bytes, not kilobytes
    assert 30 < report["records_hash_bytes_per_record"] < 1000
    # logged by the acks, before the fold: an id and a few bytes of msgpack each
    assert 0 < report["logged_hash_bytes_per_record"] < report["records_hash_bytes_per_record"]
    assert "per record, logged" in proc.stdout and "per record, folded" in proc.stdout
