"""The limits of a producer's input are written once in Python (``fastq/validate.py``)
and repeated as constants in ``enqueue.lua``: this holds them equal. No Redis needed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fastq import retry, validate
from fastq.producer import routing
from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE
from fastq.protocol.revive import _RUN_FIELDS

_CONSTANT = re.compile(r"^local ([A-Z_]+) = (.+?)\s*$")


def lua_constants() -> dict[str, Any]:
    """The ``local NAME = value`` lines of enqueue.lua: numbers, strings, and
    ``{'a', 'b'}`` lists (which may run over several lines)."""
    lines = scripts.BY_NAME["enqueue"].source.decode().splitlines()
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        m = _CONSTANT.match(lines[i])
        i += 1
        if m is None:
            continue
        name, text = m[1], m[2]
        if text.startswith("{"):
            while not text.endswith("}"):
                text += " " + lines[i].strip()
                i += 1
            out[name] = tuple(re.findall(r"'([^']*)'", text))
        elif text.startswith("'"):
            out[name] = text.strip("'")
        else:
            out[name] = int(text)
    return out


LUA = lua_constants()


@pytest.mark.parametrize(
    "name, python",
    [
        ("MAX_JOBS_PER_CALL", validate.MAX_JOBS_PER_CALL),
        ("MAX_JOBS_PER_CALL_EXTRAS", validate.MAX_JOBS_PER_CALL_EXTRAS),
        ("MAX_JOB_ID_BYTES", validate.MAX_JOB_ID_BYTES),
        ("RESERVED_PREFIX", validate.RESERVED_PREFIX),
        ("MAX_PRIORITY", validate.MAX_PRIORITY),
        ("MAX_DELAY_MS", validate.MAX_DELAY_S * 1000),
        ("MAX_TAGS", validate.MAX_TAGS),
        ("MAX_TAG_CHARS", validate.MAX_TAG_CHARS),
        ("MAX_UNIQUE_KEY_CHARS", validate.MAX_UNIQUE_KEY_CHARS),
        ("MAX_GROUP_CHARS", validate.MAX_GROUP_CHARS),
        ("MIN_ENQUEUED_AT_MS", validate.MIN_ENQUEUED_AT_MS),
        ("MAX_ENQUEUED_AHEAD_MS", validate.MAX_ENQUEUED_AHEAD_MS),
        ("MAX_RETRIES", retry.MAX_RETRIES),
        ("QUEUE_KEYS", ENQUEUE.keys),
        ("ENVELOPE_FIELDS", validate.ENVELOPE_FIELDS),
        ("WORKER_FIELDS", validate.WORKER_FIELDS),
        ("BATCH_FIELD", validate.BATCH_FIELD),
    ],
)
def test_the_script_checks_the_limits_python_checks(name: str, python: Any) -> None:
    assert LUA[name] == python


def test_the_producer_sends_calls_the_script_takes() -> None:
    assert routing.ENQUEUE_CHUNK == validate.MAX_JOBS_PER_CALL
    assert routing.ENQUEUE_CHUNK_EXTRAS == validate.MAX_JOBS_PER_CALL_EXTRAS
    # two values per job (three with a unique key) go in one command (lib/many.lua's
    # chunk), itself within an unpack(), and pairs stay whole
    assert 3 * validate.MAX_JOBS_PER_CALL <= LUA["MANY"] < 8000
    assert LUA["MANY"] % 2 == 0


def test_the_fields_workers_and_scripts_write_are_those_revive_clears() -> None:
    # a revived job is a new run, outside the batch that counted its end
    assert set(validate.WORKER_FIELDS) | {validate.BATCH_FIELD} == set(_RUN_FIELDS)
    assert not set(validate.WORKER_FIELDS) & set(validate.ENVELOPE_FIELDS)
    assert validate.BATCH_FIELD not in validate.ENVELOPE_FIELDS + validate.WORKER_FIELDS
