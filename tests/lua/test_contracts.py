"""Every script's header against its declaration in ``fastq.protocol.contracts``.

A script's header is its leading comment block. Its KEYS lines read
``-- KEYS[i] name  type  what``, its ARGV lines ``-- ARGV[i] name  what`` and, for a
variadic tail, ``-- ARGV[i..] name  what``; names are single words, KEYS names are
``QueueKeys`` attributes. No Redis needed.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Optional

import pytest

from fastq.protocol import contracts, scripts
from fastq.protocol.contracts.base import Contract
from fastq.protocol.keys import BatchKeys, NamespaceKeys, QueueKeys

_KEYS = re.compile(r"^-- KEYS\[(\d+)\]\s+(\w+)(\s|$)")
_KEYS_REST = re.compile(r"^-- KEYS\[(\d+)\.\.\]\s+(\w+)(\s|$)")
_ARGV = re.compile(r"^-- ARGV\[(\d+)(\.\.)?\]\s+(\w+)(\s|$)")
_MENTION = re.compile(r"^--\s*(KEYS|ARGV)\[")


@dataclass
class Header:
    keys: list[str]
    keys_rest: Optional[str]
    argv: list[str]
    argv_rest: Optional[str]
    problems: list[str]


def read_header(source: str) -> Header:
    """Parse the KEYS and ARGV lines of a script's leading comment block."""
    header = Header([], None, [], None, [])
    for n, line in enumerate(source.splitlines(), 1):
        if not (line.startswith("--") or (n == 1 and line.startswith("#!"))):
            break
        keys, argv, rest = _KEYS.match(line), _ARGV.match(line), _KEYS_REST.match(line)
        if rest:
            if int(rest[1]) != len(header.keys) + 1:
                header.problems.append(f"line {n}: KEYS[{rest[1]}..] out of order")
            header.keys_rest = rest[2]
        elif keys:
            if header.keys_rest is not None:
                header.problems.append(f"line {n}: KEYS[{keys[1]}] after the variadic tail")
            if int(keys[1]) != len(header.keys) + 1:
                header.problems.append(f"line {n}: KEYS[{keys[1]}] out of order")
            header.keys.append(keys[2])
        elif argv:
            if int(argv[1]) != len(header.argv) + 1 or header.argv_rest is not None:
                header.problems.append(f"line {n}: ARGV[{argv[1]}] out of order")
            if argv[2]:
                header.argv_rest = argv[3]
            else:
                header.argv.append(argv[3])
        elif _MENTION.match(line):
            header.problems.append(f"line {n}: irregular header line: {line!r}")
    return header


def check(contract: contracts.Contract[Any], source: str) -> list[str]:
    """What disagrees between a script's source and its declaration (empty: all agree)."""
    header = read_header(source)
    problems = list(header.problems)
    if header.keys != list(contract.keys):
        problems.append(f"KEYS: header {header.keys} != declared {list(contract.keys)}")
    if header.keys_rest != contract.keys_rest:
        problems.append(f"KEYS tail: header {header.keys_rest} != declared {contract.keys_rest}")
    declared_argv = (list(contract.argv_names), contract.argv_rest)
    if (header.argv, header.argv_rest) != declared_argv:
        problems.append(
            f"ARGV: header {(header.argv, header.argv_rest)} != declared {declared_argv}"
        )
    return problems


def source_of(name: str) -> str:
    return resources.files("fastq.protocol").joinpath("lua", f"{name}.lua").read_text()


def test_every_script_has_a_declaration_and_every_declaration_a_script() -> None:
    lua = resources.files("fastq.protocol").joinpath("lua")
    files = {p.name[: -len(".lua")] for p in lua.iterdir() if p.name.endswith(".lua")}
    assert files == {c.name for c in contracts.ALL}


def test_the_scripts_fastq_loads_are_its_contracts_scripts_each_declared_once() -> None:
    assert {s.name for s in scripts.loaded()} == set(contracts.NAMES) == set(contracts.BY_NAME)
    assert all(scripts.BY_NAME[c.name] is c.script for c in contracts.ALL)
    with pytest.raises(ValueError, match="extend script is declared twice"):
        Contract("extend")


@pytest.mark.parametrize("contract", contracts.ALL, ids=lambda c: c.name)
def test_header_agrees_with_the_declaration(contract: contracts.Contract[Any]) -> None:
    assert check(contract, source_of(contract.name)) == []


@pytest.mark.parametrize("contract", contracts.ALL, ids=lambda c: c.name)
def test_declaration_is_consistent(contract: contracts.Contract[Any]) -> None:
    # every KEYS name is a key of a queue (or of a batch, for a batch's own scripts)
    assert all(hasattr(contract.key_space, name) for name in contract.keys), contract.keys
    # the ARGV builder takes the declared ARGV, in order, by name
    params = list(inspect.signature(contract.argv).parameters)
    assert params[: len(contract.argv_names)] == list(contract.argv_names)
    assert len(params) > len(contract.argv_names) or contract.argv_rest is None
    spaces = {
        QueueKeys: QueueKeys("ns", "q"),
        BatchKeys: BatchKeys("ns", "b"),
        NamespaceKeys: NamespaceKeys("ns"),  # a circuit breaker's: no queue's
    }
    assert len(contract.keys_for(spaces[contract.key_space], "w")) == len(contract.keys)


def test_the_checker_catches_a_doctored_header() -> None:
    good = source_of("extend")
    assert check(contracts.EXTEND, good) == []
    swapped = good.replace("-- KEYS[1] leases", "-- KEYS[1] held").replace(
        "-- KEYS[2] held  ", "-- KEYS[2] leases"
    )
    assert any("KEYS" in p for p in check(contracts.EXTEND, swapped))
    missing = good.replace("-- KEYS[2] held", "-- held")
    assert any("KEYS" in p for p in check(contracts.EXTEND, missing))
    renamed = good.replace("-- ARGV[2] lease_ms", "-- ARGV[2] lease_s")
    assert any("ARGV" in p for p in check(contracts.EXTEND, renamed))
    irregular = good.replace("-- ARGV[2] lease_ms", "-- ARGV [2] lease_ms").replace(
        "-- ARGV [2]", "-- ARGV[two]"
    )
    assert check(contracts.EXTEND, irregular) != []
    # a header line out of its numbered order
    reordered = good.replace("-- KEYS[2] held", "-- KEYS[3] held")
    assert any("out of order" in p for p in check(contracts.EXTEND, reordered))
    # the script's KEYS against another script's declaration
    assert check(contracts.CLAIM, good) != []


def test_the_checker_reads_only_the_header() -> None:
    source = (
        "#!lua flags=allow-oom\n-- KEYS[1] leases  zset\n-- ARGV[1] worker_id\n"
        "\nlocal x = 1\n-- KEYS[2] held\n"
    )
    header = read_header(source)
    assert (header.keys, header.argv, header.problems) == (["leases"], ["worker_id"], [])
