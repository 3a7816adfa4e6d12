"""A producer during a Redis stall (SIGSTOP of redis-server: a big fork, a slow disk):
its call gives up within the app's call_timeout_s, not after the minutes redis-py's
retries of a 30 s read would take, and its error names the ids, so that the retry
adds each job once, whether or not the call had gone in."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer

BOUND_S = 2.0  # the app's call_timeout_s here


@contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    assert server.process is not None
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture
def bounded(redis_server: RedisServer, namespace: str) -> Iterator[fastq.App]:
    a = fastq.App(redis_server.url, namespace=namespace, call_timeout_s=BOUND_S)
    a.declare_queue("q")
    a.enqueue("warm-up", queue="q", job_id="warm")  # connected, scripts loaded
    yield a
    a.close()


def jobs_in(r: redis.Redis, app: fastq.App) -> int:
    return int(r.hlen(app.keys("q").jobs))


def test_enqueue_gives_up_in_bounded_time_and_names_the_id(
    redis_server: RedisServer, bounded: fastq.App, r: redis.Redis
) -> None:
    with stalled(redis_server):
        started = time.monotonic()
        with pytest.raises(fastq.RedisUnavailable) as raised:
            bounded.enqueue("send", (1,), queue="q")
        took_s = time.monotonic() - started
    assert took_s < 4 * BOUND_S, f"{took_s:.1f} s"  # a generous bound: the point is minutes
    exc = raised.value
    assert isinstance(exc, fastq.EnqueueInterrupted)  # an EnqueueError with the ids
    [job_id] = exc.ids
    assert job_id in str(exc) and "job_id=exc.ids[0]" in str(exc)
    # Redis is back: the call had gone in (it sat in the server's socket) or not; a
    # retry with its id leaves one job either way
    assert bounded.enqueue("send", (1,), queue="q", job_id=job_id) == job_id
    assert jobs_in(r, bounded) == 2  # the warm-up's and this one
    assert bounded.get_job(job_id, "q") is not None


def test_enqueue_many_gives_up_in_bounded_time_and_the_retry_adds_each_once(
    redis_server: RedisServer, bounded: fastq.App, r: redis.Redis
) -> None:
    calls = [(i,) for i in range(2500)]
    with stalled(redis_server):
        started = time.monotonic()
        with pytest.raises(fastq.EnqueueInterrupted) as raised:
            bounded.enqueue_many("send", calls, queue="q")
        took_s = time.monotonic() - started
    assert took_s < 4 * BOUND_S, f"{took_s:.1f} s"
    exc = raised.value
    assert len(exc.ids) == len(calls) and len(set(exc.ids)) == len(calls)
    assert bounded.enqueue_many("send", calls, queue="q", job_ids=exc.ids) == exc.ids
    assert jobs_in(r, bounded) == len(calls) + 1


def test_an_operator_call_gives_up_in_bounded_time_too(
    redis_server: RedisServer, bounded: fastq.App
) -> None:
    with stalled(redis_server):
        started = time.monotonic()
        with pytest.raises(fastq.RedisUnavailable):
            bounded.pause("q")
        took_s = time.monotonic() - started
    assert took_s < 4 * BOUND_S, f"{took_s:.1f} s"
    bounded.pause("q")  # and works once Redis is back
    assert bounded.stats("q")["paused"] == 1


@pytest.mark.parametrize("bad", [0, 1.5, -1, float("nan"), float("inf"), "5", True])
def test_a_bad_call_timeout_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="call_timeout_s"):
        fastq.App("redis://127.0.0.1:1/0", call_timeout_s=bad)  # type: ignore[arg-type]
