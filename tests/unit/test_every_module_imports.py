"""Every module of fastq imports on this Python, the optional extras' too: what
ci/pythons.sh runs first under the oldest and the newest Python, where a syntax or
an annotation that only a newer Python knows would fail at import."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import fastq


def _modules() -> list[str]:
    # not __main__: importing it runs the command line
    walk = pkgutil.walk_packages(fastq.__path__, prefix="fastq.")
    return sorted(info.name for info in walk if not info.name.endswith(".__main__"))


def test_the_walk_finds_the_layers() -> None:
    names = _modules()
    assert len(names) > 100
    assert {"fastq.worker.worker", "fastq.serve.app", "fastq.cli.main"} <= set(names)


@pytest.mark.parametrize("name", _modules())
def test_the_module_imports(name: str) -> None:
    importlib.import_module(name)
