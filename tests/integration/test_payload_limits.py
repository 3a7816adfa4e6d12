"""Bounds on what a job puts in Redis: its payload at enqueue, its stored error and
traceback when it fails."""

from __future__ import annotations

import pytest
import redis

import fastq
from fastq.runners.settle import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS
from fastq.testing.redis_server import RedisServer
from tests.support.keys import namespace_keys
from tests.support.workers import drain


def test_an_oversize_job_is_refused_at_enqueue_and_nothing_is_written(
    redis_server: RedisServer, r: redis.Redis, namespace: str
) -> None:
    app = fastq.App(redis_server.url, namespace=namespace, max_payload_bytes=1000)

    @app.job(queue="big")
    def store(blob: str) -> None: ...

    with pytest.raises(ValueError) as info:
        store.enqueue("x" * 1000)
    assert str(info.value) == (
        "job 'store' is 1,028 bytes encoded, over the limit of 1,000 "
        "(App(max_payload_bytes=...)): pass a reference to the data (a key, a URL), "
        "not the data"
    )
    with pytest.raises(ValueError, match=r"^call 2: job 'store' is 2,028 bytes encoded"):
        app.enqueue_many("store", [("a",), ("b",), ("y" * 2000,), ("z" * 3000,)])
    assert namespace_keys(r, namespace) == []  # nothing written, no queue made
    store.enqueue("x" * 900)  # under the bound
    assert app.stats("big")["ready"] == 1
    app.close()


def test_the_default_limit_is_4_mib() -> None:
    app = fastq.App("redis://127.0.0.1:1/0")
    assert app.max_payload_bytes == 4 * 1024 * 1024
    with pytest.raises(ValueError, match="must be >= 1"):
        fastq.App(max_payload_bytes=0)
    with pytest.raises(TypeError, match="must be an int"):
        fastq.App(max_payload_bytes=1.5)  # type: ignore[arg-type]


def test_a_huge_error_and_traceback_are_stored_cut_to_a_bound(app: fastq.App) -> None:
    @app.job(queue="huge", retries=0)
    def explode(depth: int) -> None:
        if depth:
            explode.fn(depth - 1)  # a deep traceback
        raise RuntimeError("E" * 100_000)

    job_id = explode.enqueue(300)
    drain(app, ["huge"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead"
    assert info.last_error is not None and info.traceback is not None
    assert info.last_error.startswith("RuntimeError: EEEE")
    assert info.last_error.endswith("... [98,014 more characters cut]")
    assert len(info.last_error) == MAX_ERROR_CHARS + len("... [98,014 more characters cut]")
    # the end of a traceback is kept: where the exception was raised
    assert info.traceback.startswith("[") and " characters cut] ..." in info.traceback
    assert info.traceback.rstrip().endswith("E" * 100)
    assert len(info.traceback) < MAX_TRACEBACK_CHARS + 100
