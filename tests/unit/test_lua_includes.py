"""Lua includes nest: a script's ``--! include X`` pulls in ``lib/X.lua`` and what
that includes, each lib once, the included before the including, and a cycle is
refused (``fastq.protocol.scripts.assemble``; no Redis)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fastq.protocol import contracts, scripts


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_libs_come_once_each_after_what_they_include_in_the_order_named(
    tmp_path: Path,
) -> None:
    lua = plant(
        tmp_path,
        {
            "verb.lua": "#!lua flags=allow-oom\n--! include c\n--! include b\nreturn c() + b()\n",
            "lib/a.lua": "local function a() return 1 end\n",
            "lib/b.lua": "--! include a\nlocal function b() return a() end\n",
            "lib/c.lua": "--! include a\n--! include b\nlocal function c() return b() end\n",
        },
    )
    assert scripts.assemble("verb", lua).decode() == "\n".join(
        [
            "#!lua flags=allow-oom",  # the flags stay first
            "local function a() return 1 end\n",
            "--! include a\nlocal function b() return a() end\n",
            "--! include a\n--! include b\nlocal function c() return b() end\n",
            "--! include c\n--! include b\nreturn c() + b()\n",
        ]
    )


def test_only_the_leading_lines_include(tmp_path: Path) -> None:
    lua = plant(
        tmp_path,
        {
            "verb.lua": "--! include a\nlocal x = 1\n--! include b\n",
            "lib/a.lua": "-- a\n--! include b\n",
        },
    )
    assert scripts.assemble("verb", lua) == b"-- a\n--! include b\n\n" + (
        b"--! include a\nlocal x = 1\n--! include b\n"
    )


@pytest.mark.parametrize(
    ("libs", "cycle"),
    [
        ({"a": "--! include a\n"}, "verb -> a -> a"),
        (
            {"a": "--! include b\n", "b": "--! include c\n", "c": "--! include a\n"},
            "verb -> a -> b -> c -> a",
        ),
    ],
)
def test_an_include_cycle_is_refused(tmp_path: Path, libs: dict[str, str], cycle: str) -> None:
    lua = plant(
        tmp_path, {"verb.lua": "--! include a\n", **{f"lib/{n}.lua": t for n, t in libs.items()}}
    )
    with pytest.raises(ValueError, match=f"a Lua include cycle: {cycle}$"):
        scripts.assemble("verb", lua)


LIB = Path(scripts.__file__).parent / "lua" / "lib"
# the helpers the libs define (local functions and constants)
HELPERS = {
    a or b
    for path in LIB.glob("*.lua")
    for a, b in re.findall(r"^local function (\w+)|^local ([A-Z_]+) =", path.read_text(), re.M)
}


@pytest.mark.parametrize("contract", contracts.ALL, ids=lambda c: c.name)
def test_each_of_fastqs_scripts_defines_each_helper_it_uses_once_above_its_uses(
    contract: contracts.Contract[object],
) -> None:
    lines = contract.script.source.decode().split("\n")
    code = [(i, line) for i, line in enumerate(lines) if not line.lstrip().startswith("--")]
    for name in HELPERS:
        defined = [i for i, line in code if re.match(rf"local (function )?{name}\b", line)]
        used = [i for i, line in code if re.search(rf"\b{name}\b", line)]
        if used:
            assert len(defined) == 1, f"{name} is defined {len(defined)} times"
            assert min(used) == defined[0], f"{name} is used above its definition"
