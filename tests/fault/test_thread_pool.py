"""``fastq pool --threads N`` under faults: children SIGKILLed and SIGTERMed
mid-drain, a hard stop, jobs past their timeout in a thread.

The contract is the pool's: each job ran at least once, none was lost, none ran
twice after a graceful stop, and re-runs stay within what the killed children
held (at most N in flight each: a child never claims more than its free threads).
"""

from __future__ import annotations

from typing import Callable

import pytest
import redis
from pooltools import Pool, kill_children_while, pools, redis_server, runs, wait_until  # noqa: F401

import fastq

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

APP = ("--app", "tests.apps.thread_jobs")


@pytest.mark.parametrize("mixed", [False, True])
def test_sigkill_children_with_jobs_in_threads(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], mixed: bool
) -> None:
    n, threads = 4000, 20
    if mixed:  # odd jobs async on the loop, even ones in the threads
        for i in range(0, n, 500):
            app.enqueue_many("work", [(j, 0.01) for j in range(i, i + 500, 2)], queue="q")
            app.enqueue_many("awork", [(j, 0.01) for j in range(i + 1, i + 500, 2)], queue="q")
        options = ["--threads", str(threads // 2), "--concurrency", str(threads // 2)]
    else:
        app.enqueue_many("work", [(i, 0.01) for i in range(n)], queue="q")
        options = ["--threads", str(threads)]
    app_spec = ("--app", "tests.apps.mixed_jobs") if mixed else APP
    # a job handed back goes to the front and may be running at the next kill too:
    # enough stalls allowed that no job goes dead here
    pool = pools(*app_spec, "-c", "2", *options, "--batch", "20", "--max-stalls", "20")
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
    assert duplicates <= stats["stalled"] + stats["orphaned"] <= kills * 2 * threads
    assert kills >= 2, "the drain ended before the test could kill anything"


def test_sigterm_mid_drain_waits_for_the_threads(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 3000
    app.enqueue_many("work", [(i, 0.05) for i in range(n)], queue="q")
    pool = pools(*APP, "-c", "2", "--threads", "30", "--graceful-timeout", "10")
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    stats = app.stats("q")
    assert set(ran.values()) == {1}, "a job ran twice"
    assert stats["processed"] == len(ran)
    assert stats["inflight"] == 0 and stats["ready"] == n - len(ran)
    assert "waiting for" in pool.log()  # there were jobs in threads at the stop


def test_a_hard_stop_hands_back_the_jobs_running_in_threads(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 100
    app.enqueue_many("work", [(i, 60) for i in range(n)], queue="q")  # a minute each
    pool = pools(*APP, "-c", "2", "--threads", "10", "--graceful-timeout", "1")
    wait_until(lambda: app.stats("q")["inflight"] == 20, 30, "20 jobs in threads")
    assert pool.stop() == 0, pool.log()
    stats = app.stats("q")
    assert (stats["processed"], stats["inflight"], stats["ready"], stats["stalled"]) == (
        0, 0, n, 0,
    ), pool.log()  # fmt: skip
    assert "10 jobs still running in threads" in pool.log()


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
    assert app.get_job(retried, queue="q") is None  # done at its second attempt
    ran = runs(r, app.namespace)
    assert (ran[999], ran[998]) == (2, 2)
    assert set(ran) == set(range(400)) | {998, 999}
    assert all(ran[i] == 1 for i in range(400)), "a job ran twice"
    log = pool.log()
    assert log.count("thread cannot be stopped: recycling") == 3
    assert app.stats("q")["stalled"] == 0
