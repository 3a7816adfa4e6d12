"""A benchmark's JSON report carries its date and the commit it measured, so that a
figure quoted from it (``bench/docs_figures.py``) can say when and what it measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.harness import source_state, write_report


def test_every_report_carries_its_date_and_commit(tmp_path: Path) -> None:
    out = write_report({"jobs_s": 1.0}, "example", str(tmp_path / "r.json"))
    report = json.loads(out.read_text())
    assert report["benchmark"] == "example" and report["jobs_s"] == 1.0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date"])
    assert report["source"] == source_state()
    assert re.fullmatch(r"[0-9a-f]{40}", report["source"]["commit"])


def test_the_source_a_benchmark_took_at_its_start_is_kept(tmp_path: Path) -> None:
    source = {"commit": "0" * 40, "dirty": ["fastq/app.py"]}
    out = write_report({"source": source}, "example", str(tmp_path / "r.json"))
    assert json.loads(out.read_text())["source"] == source
