"""``fastq pool --async-jobs N`` with ``async def`` jobs under faults only the
event loop meets: a poison job, a job that blocks the loop. Children SIGKILLed
and stopped with jobs in flight: test_inflight_pool.py, for both runners.
"""

from __future__ import annotations

import re
from typing import Callable

import pytest
import redis

import fastq
from tests.support.pool import Pool, runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

APP = ("--app", "tests.apps.async_jobs")


def test_a_poison_async_job_goes_dead_after_max_stalls(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i,) for i in range(300)], queue="q")
    poison = app.enqueue("suicide", [999], queue="q")
    app.enqueue_many("work", [(i,) for i in range(300, 600)], queue="q")
    pool = pools(*APP, "-c", "2", "--async-jobs", "20", "--batch", "20", "--max-stalls", "2")
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
        *APP,
        "-c",
        "2",
        "--async-jobs",
        "10",
        "--batch",
        "10",
        "--child-timeout",
        "2",
        "--max-stalls",
        "1",
    )
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
