"""``fastq pool --threads N`` under faults only threads meet: children SIGKILLed
while they run async and thread jobs side by side, jobs past their timeout in a
thread. Children SIGKILLed and stopped with jobs in flight: test_inflight_pool.py,
for both runners.
"""

from __future__ import annotations

import re
from typing import Callable

import pytest
import redis

import fastq
from tests.support.pool import Pool, drain_while_killing_children, runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

APP = ("--app", "tests.apps.thread_jobs")


def test_sigkill_children_with_async_and_thread_jobs_mixed(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n, slots = 4000, 20
    # 20 ms jobs in 40 slots: 80% takes 1.6 s at least, whatever fastq's speed,
    # over twice the 2 kills' 0.6 s (10 ms jobs left a margin of 0.2 s)
    for i in range(0, n, 500):  # odd jobs async on the loop, even ones in the threads
        app.enqueue_many("work", [(j, 0.02) for j in range(i, i + 500, 2)], queue="q")
        app.enqueue_many("awork", [(j, 0.02) for j in range(i + 1, i + 500, 2)], queue="q")
    # a job handed back goes to the front and may be running at the next kill too:
    # enough stalls allowed that no job goes dead here
    pool = pools(
        "--app",
        "tests.apps.mixed_jobs",
        "-c",
        "2",
        "--threads",
        str(slots // 2),
        "--async-jobs",
        str(slots // 2),
        "--batch",
        "20",
        "--max-stalls",
        "20",
    )
    drain_while_killing_children(app, r, pool, n, slots)


def test_a_stuck_thread_recycles_its_child_and_the_job_goes_dead_by_its_policy(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i, 0.01) for i in range(200)], queue="q")
    stuck = app.enqueue("hangs", [999], queue="q")  # timeout_s=0.5, retries=1
    retried = app.enqueue("hangs_once", [998], queue="q")  # timeout_s=0.5, retries=2
    app.enqueue_many("work", [(i, 0.01) for i in range(200, 400)], queue="q")
    pool = pools(*APP, "-c", "2", "--threads", "8", "--batch", "10")
    wait_until(
        lambda: app.stats("q")["processed"] == 401 and app.stats("q")["dead"] == 1,
        90,
        "the drain",
    )
    assert pool.proc.poll() is None, "the pool went down"
    # each recycled child (it exits 0) is replaced by a fresh one
    recycled = "exited (exit status 0)"
    wait_until(
        lambda: pool.log().count("spawned worker") == 2 + pool.log().count(recycled),
        30,
        "fresh children",
    )
    assert pool.log().count(recycled) >= 1
    assert pool.stop() == 0
    info = app.get_job(stuck, queue="q")
    assert info is not None and info.state == "dead" and info.attempts == 2
    assert "timeout_s=0.5" in (info.last_error or "")
    assert (
        getattr(app.get_job(retried, queue="q"), "state", None) == "done"
    )  # done at its second attempt
    ran = runs(r, app.namespace)
    assert (ran[999], ran[998]) == (2, 2)
    assert set(ran) == set(range(400)) | {998, 999}
    assert all(ran[i] == 1 for i in range(400)), "a job ran twice"
    log = pool.log()
    assert log.count("thread cannot be stopped: recycling") == 3
    assert app.stats("q")["stalled"] == 0


def test_jobs_waiting_for_a_thread_behind_long_jobs_go_to_other_workers(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    """Every thread of a child runs a long job (an hour's sleep): the jobs it claimed
    that wait for a thread (a claim sized for its async slots too brought them) go
    back to the queue, and another worker runs them."""
    app.enqueue_many("work", [(i, 3600) for i in (998, 999)], queue="q")
    app.enqueue_many("work", [(i,) for i in range(600)], queue="q")
    threads = pools(
        "--app",
        "tests.apps.mixed_jobs",
        "-c",
        "1",
        "--threads",
        "2",
        "--async-jobs",
        "40",
        "--graceful-timeout",
        "1",
    )
    wait_until(lambda: set(runs(r, app.namespace)) == {998, 999}, 30, "the long jobs")
    held = app.stats("q")["inflight"]
    assert held > 2, "the jobs behind the long ones were not claimed with them"
    other = pools(*APP, "-c", "1")
    wait_until(lambda: app.stats("q")["processed"] == 600, 60, "the jobs behind the long ones")
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(600)) | {998, 999} and set(ran.values()) == {1}
    assert app.stats("q")["inflight"] == 2  # the long jobs, still running
    assert re.search(r"\d+ jobs waited 2 s for a free thread; back to the queue", threads.log())
    other.stop()
    threads.stop()
