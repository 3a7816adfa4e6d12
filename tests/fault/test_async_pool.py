"""``fastq pool --concurrency N`` with ``async def`` jobs under faults: children
SIGKILLed and SIGTERMed mid-drain, a poison job, a job that blocks the loop.

The contract is the pool's: each job ran at least once, none was lost, none ran
twice after a graceful stop, and re-runs stay within what the killed children
held (at most N in flight each: a child never claims more than its free slots).
"""

from __future__ import annotations

import re
from typing import Callable

import pytest
import redis
from pooltools import Pool, gone, kill_children_while, pools, redis_server, runs, wait_until  # noqa: F401

import fastq

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

APP = ("--app", "tests.apps.async_jobs")


def test_sigkill_children_with_jobs_in_flight(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n, in_flight = 6000, 40
    app.enqueue_many("work", [(i, 0.02) for i in range(n)], queue="q")
    # a job handed back goes to the front and may be running at the next kill too:
    # enough stalls allowed that no job goes dead here (poison jobs: a test below)
    pool = pools(
        *APP, "-c", "2", "--concurrency", str(in_flight), "--batch", "20", "--max-stalls", "20"
    )
    pool.wait_children(2)
    kills = kill_children_while(
        pool.children, lambda: app.stats("q")["processed"] < n * 0.7, max_kills=6, every_s=0.3
    )
    wait_until(lambda: app.stats("q")["processed"] == n, 90, "the drain")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(n)), "a job was lost"
    duplicates = sum(v - 1 for v in ran.values())
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["dead"]) == (n, 0, 0, 0)
    # a killed child held at most its slots, plus jobs that finished unacknowledged
    # (at most its slots again): the round trip that acks them also claims
    assert duplicates <= stats["stalled"] + stats["orphaned"] <= kills * 2 * in_flight
    assert kills >= 2, "the drain ended before the test could kill anything"


def test_sigterm_mid_drain_waits_for_the_jobs_in_flight(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 4000
    app.enqueue_many("work", [(i, 0.05) for i in range(n)], queue="q")
    pool = pools(*APP, "-c", "2", "--concurrency", "50", "--graceful-timeout", "10")
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    stats = app.stats("q")
    assert set(ran.values()) == {1}, "a job ran twice"
    assert stats["processed"] == len(ran)
    assert stats["inflight"] == 0 and stats["ready"] == n - len(ran)
    assert "waiting for" in pool.log()  # there were jobs in flight at the stop


def test_a_hard_stop_cancels_the_jobs_in_flight_and_hands_them_back(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 200
    app.enqueue_many("work", [(i, 60) for i in range(n)], queue="q")  # a minute each
    pool = pools(*APP, "-c", "2", "--concurrency", "30", "--graceful-timeout", "1")
    wait_until(lambda: app.stats("q")["inflight"] == 60, 30, "60 jobs in flight")
    assert pool.stop() == 0, pool.log()
    stats = app.stats("q")
    assert (stats["processed"], stats["inflight"], stats["ready"], stats["stalled"]) == (
        0, 0, n, 0,
    ), pool.log()  # fmt: skip
    assert "cancelling 30 jobs in flight" in pool.log()


def test_a_poison_async_job_goes_dead_after_max_stalls(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i,) for i in range(300)], queue="q")
    poison = app.enqueue("suicide", [999], queue="q")
    app.enqueue_many("work", [(i,) for i in range(300, 600)], queue="q")
    pool = pools(*APP, "-c", "2", "--concurrency", "20", "--batch", "20", "--max-stalls", "2")
    wait_until(
        lambda: app.stats("q")["processed"] == 600 and app.stats("q")["dead"] == 1, 60, "the drain"
    )
    assert pool.proc.poll() is None, "the pool went down"
    assert pool.stop() == 0
    info = app.get_job(poison, queue="q")
    assert info is not None and info.state == "dead"
    assert "stalled 3 times" in (info.last_error or "")
    assert runs(r, app.namespace)[999] == 3
    assert set(runs(r, app.namespace)) == set(range(600)) | {999}


def test_a_job_that_blocks_the_loop_gets_its_child_replaced(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i, 0.01) for i in range(200)], queue="q")
    blocker = app.enqueue("blocks", [999], queue="q")
    app.enqueue_many("work", [(i, 0.01) for i in range(200, 400)], queue="q")
    pool = pools(
        *APP, "-c", "2", "--concurrency", "10", "--batch", "10",
        "--child-timeout", "2", "--max-stalls", "1",
    )  # fmt: skip
    wait_until(
        lambda: app.stats("q")["processed"] == 400 and app.stats("q")["dead"] == 1, 90, "the drain"
    )
    assert pool.stop() == 0
    info = app.get_job(blocker, queue="q")
    assert info is not None and info.state == "dead"
    assert runs(r, app.namespace)[999] == 2  # max_stalls 1: dead at the second
    assert set(runs(r, app.namespace)) == set(range(400)) | {999}
    log = pool.log()
    assert "silent" in log
    # named while the loop was stuck; only it counted a stall, not the jobs it held up
    named = rf"event loop has been blocked for .* by job {re.escape(blocker)} \(blocks\)"
    assert re.search(named, log), log
    assert app.stats("q")["stalled"] == 2
