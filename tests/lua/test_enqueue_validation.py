"""enqueue.lua checks its input before its first write: a refused call writes nothing.

What the Python producer refuses up front, the script refuses too, so that a
producer in another language cannot write what a worker cannot serve.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE
from fastq.protocol.keys import QueueKeys


def env(job_id: str) -> bytes:
    return orjson.dumps({"id": job_id, "args": [], "kwargs": {}, "name": "j", "queue": "q"})


def enqueue_argv(r: redis.Redis, k: QueueKeys, argv: list[Any]) -> int:
    return int(scripts.call(r, ENQUEUE.script, ENQUEUE.keys_for(k), argv))


def pairs(*ids: str) -> list[Any]:
    out: list[Any] = []
    for i in ids:
        out += [i, env(i)]
    return out


SENTINEL = "fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "ARGV must be priority, delay_ms"),
        ([0], "ARGV must be priority, delay_ms"),
        ([0, 0], "ARGV must be priority, delay_ms"),  # no extras
        ([0, 0, "", "a"], "ARGV must be priority, delay_ms"),  # an id without its envelope
        ([0, 0, "", *pairs("a"), "b"], "ARGV must be priority, delay_ms"),
        (["high", 0, "", *pairs("a")], "priority must be an integer"),
        ([1.5, 0, "", *pairs("a")], "priority must be an integer"),
        ([2**21, 0, "", *pairs("a")], "priority must be an integer"),
        (["nan", 0, "", *pairs("a")], "priority must be an integer"),
        ([0, "soon", "", *pairs("a")], "delay_ms must be a number"),
        ([0, -1, "", *pairs("a")], "delay_ms must be a number"),
        ([0, "inf", "", *pairs("a")], "delay_ms must be a number"),
        ([0, "nan", "", *pairs("a")], "delay_ms must be a number"),
        ([0, 10**300, "", *pairs("a")], "delay_ms must be a number"),
        ([0, 0, "", *pairs("a", "")], "job id #2 must be 1 to 200 bytes"),
        ([0, 0, "", *pairs("a", "x" * 201)], "job id #2 must be 1 to 200 bytes"),
        ([0, 0, "", *pairs("a", "b", SENTINEL)], "job id #3 starts with the reserved prefix"),
        ([0, 0, "", *pairs("fastq:mine")], "job id #1 starts with the reserved prefix"),
    ],
)
def test_refused_calls_write_nothing(
    r: redis.Redis, namespace: str, argv: list[Any], message: str
) -> None:
    k = QueueKeys(namespace, "q")
    with pytest.raises(redis.ResponseError, match=f"fastq enqueue: {message}"):
        enqueue_argv(r, k, argv)
    assert list(r.scan_iter(match=f"{namespace}:*")) == []


def test_the_character_set_is_the_producers_to_check(r: redis.Redis, namespace: str) -> None:
    # the script refuses only what breaks the queue (length, the reserved prefix): a
    # pattern match per id would cost an eighth of the call; fastq's producer refuses
    # whitespace, control and non-ASCII ids before they reach Redis
    k = QueueKeys(namespace, "q")
    assert enqueue_argv(r, k, [0, 0, "", *pairs("has space", "zero\u200bwidth")]) == 2


def test_the_limits_themselves_are_accepted(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    ids = ["x" * 200, "!~{}[]\"'\\", "a", "fastq-not-reserved", "FASTQ:upper"]
    assert enqueue_argv(r, k, [2**20, 0, "", *pairs(*ids)]) == len(ids)
    assert enqueue_argv(r, k, [-(2**20), 315_360_000_000, "", *pairs("later")]) == 1
    assert enqueue_argv(r, k, [0, 0, ""]) == 0
    assert r.hlen(k.jobs) == len(ids) + 1
