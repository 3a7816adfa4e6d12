"""The wheel ships every module and Lua script of fastq/: packaging follows the
folders (setuptools finds the packages and the package data by pattern), so a new
subpackage or script cannot be left out of a release by a forgotten line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]


def _source_files() -> list[str]:
    """The repository's files as a clean clone has them."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=TOP, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in out.split("\0") if name]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_holds_every_module_and_lua_file_of_fastq(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for name in _source_files():
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(TOP / name, target)
    dist = tmp_path / "dist"
    # unoptimised C: what is checked is what the wheel holds, and gcc -O2 of the
    # kernels was most of this test's minute and a half on a loaded 2-core machine
    env = {**os.environ, "CFLAGS": "-O0"}
    # built by this venv's setuptools and Cython (ci/setup.sh installs them from the
    # lock): an isolated build would fetch the newest of the day
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
        + ["-w", str(dist), str(src)],
        check=True,
        timeout=540,
        env=env,
    )
    (wheel,) = dist.glob("fastq-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())

    wanted = {
        path.relative_to(src).as_posix()
        for path in (src / "fastq").rglob("*")
        if path.suffix in (".py", ".lua") or path.name == "py.typed"
    }
    # the dashboard's templates and vendored scripts, with their licences
    dashboard = {
        path.relative_to(src).as_posix()
        for folder in ("templates", "static")
        for path in (src / "fastq" / "serve" / folder).rglob("*")
        if path.is_file()
    }
    vendored = {f"fastq/serve/static/vendor/{name}" for name in ("htmx.min.js", "htmx.LICENSE")}
    assert vendored <= dashboard
    assert dashboard - shipped == set()
    assert len([w for w in wanted if w.endswith(".lua")]) >= 20  # the check sees the scripts
    assert wanted - shipped == set()
    for kernel in ("codec", "backoff", "runner", "ids"):
        assert any(n.startswith(f"fastq_ext/{kernel}.") and n.endswith(".so") for n in shipped)
        assert f"fastq_ext/{kernel}.pyi" in shipped
