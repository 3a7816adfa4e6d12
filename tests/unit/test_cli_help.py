"""Every ``fastq`` command's --help shows examples (a new user reads them first)."""

from __future__ import annotations

import argparse

import pytest

from fastq.cli.main import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_commands_help_has_examples_that_name_it(name: str) -> None:
    text = _commands()[name].format_help()
    assert "example" in text
    assert f"fastq {name}" in text.split("example", 1)[1]
