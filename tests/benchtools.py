"""Shared by the benchmark smoke tests: run a benchmark as a user would,
``python -m bench.<module>`` from the repository root, and hand back what it printed
and the JSON it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT


def run_bench_script(
    module: str, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bench.<module>`` with ``args`` and assert it exited 0; on
    failure the assertion message carries its stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def run_bench(
    module: str, *args: str, tmp_path: Path, timeout_s: float = 120
) -> tuple[Any, subprocess.CompletedProcess[str]]:
    """Run ``python -m bench.<module>`` with ``args`` and ``--json <file in tmp_path>``
    appended, assert it exited 0, and return the JSON report it wrote and the finished
    process (for the tests that check its stdout)."""
    out = tmp_path / f"{module}.json"
    proc = run_bench_script(module, *args, "--json", str(out), timeout_s=timeout_s)
    return json.loads(out.read_text()), proc
