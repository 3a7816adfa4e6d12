"""Redis loses its data under a running ``fastq pool``: an operator's ``FLUSHDB``, or a
Redis restarted without persistence. Every process (the master, each worker child,
the reaper) says so in one ERROR line naming what it held, and the pool goes on
with the jobs enqueued afterwards. A loss that did not happen (a fresh Redis, a
drain, a purge, a restart from an AOF) is never reported.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Callable, Iterator

import pytest
import redis

import fastq
from fastq.monitor.losses import CHECK_S
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, noted_runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]

LOST = re.compile(r" ERROR fastq\.\w+: (master \d+|worker \S+|reaper): Redis lost its data (.*)")


@pytest.fixture
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A server of the test's own: with every write in an AOF (fsynced), unless the
    test is parametrized with ``False`` (no AOF, no RDB: a restart starts empty)."""
    s = RedisServer(appendonly=getattr(request, "param", True)).start()
    yield s
    s.cleanup()


def losses(pool: Pool) -> Counter[str]:
    """How many loss lines each process logged, by who it is."""
    return Counter(m.group(1) for m in LOST.finditer(pool.log()))


def start_holding(app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]) -> Pool:
    """A pool (2 workers and a reaper) whose every process has noted its queues'
    markers, and whose two workers hold jobs (slow ones, 5 a batch)."""
    # a delayed job on a queue no worker serves: only the reaper's sweep promotes it,
    # and the reaper notes its markers before its first sweep
    app.enqueue("note", [10_000], queue="other", delay_s=0.2)
    app.enqueue_many("note", [(i, 0.4) for i in range(60)], queue="q")
    pool = pools("-c", "2", "--batch", "5")
    pool.wait_children(2)
    pool.wait_children(1, "reaper")
    wait_until(lambda: app.stats("other")["ready"] == 1, 30, "the reaper's first sweep")
    # workers note their markers before they claim: each holds a lease now
    leases = app.keys("q").leases
    wait_until(lambda: r.zcard(leases) == 2, 30, "both workers holding jobs")
    return pool


def assert_one_loss_each_and_new_jobs_run(app: fastq.App, pool: Pool) -> None:
    wait_until(lambda: len(losses(pool)) == 4, 30, "a loss line from each of the 4 processes")
    app.enqueue_many("note", [(1000 + i,) for i in range(20)], queue="q")
    wait_until(
        lambda: all(noted_runs(pool)[1000 + i] == 1 for i in range(20)),
        60,
        "the jobs enqueued after the loss",
    )
    # a few more looks at the markers by every process: none says it again
    time.sleep(3 * CHECK_S)
    assert pool.stop() == 0, pool.log()
    log = pool.log()
    seen = losses(pool)
    assert sorted(who.split()[0] for who in seen) == ["master", "reaper", "worker", "worker"], log
    assert set(seen.values()) == {1}, log
    for m in LOST.finditer(log):
        who, said = m.groups()
        assert "FLUSHDB" in said and app.keys("q").marker in said, said
        if who.startswith("worker"):
            # the worker names what it held: a batch or two of the slow jobs
            held = re.search(r"(\d+) jobs? this worker held no longer exist: ids (.*)", said)
            assert held is not None and 1 <= int(held.group(1)) <= 10, log


def test_flushdb_under_a_running_pool_says_so_once_per_process(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    pool = start_holding(app, r, pools)
    r.flushdb()
    assert_one_loss_each_and_new_jobs_run(app, pool)


@pytest.mark.parametrize(
    "redis_server", [False, True], ids=["no-persistence", "aof"], indirect=True
)
def test_redis_restarted_under_a_running_pool(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], redis_server: RedisServer
) -> None:
    pool = start_holding(app, r, pools)
    redis_server.restart()
    if not redis_server.appendonly:
        assert_one_loss_each_and_new_jobs_run(app, pool)
        return
    # from its AOF: nothing was lost, and nothing is said
    wait_until(lambda: app.stats("q")["processed"] == 60, 90, "the drain after the restart")
    time.sleep(3 * CHECK_S)
    assert pool.stop() == 0, pool.log()
    assert not losses(pool), pool.log()
    assert set(noted_runs(pool)) == set(range(60))


def test_a_fresh_redis_a_drain_and_a_purge_are_no_loss(
    app: fastq.App, pools: Callable[..., Pool]
) -> None:
    app.enqueue("note", [10_000], queue="other", delay_s=3600)
    app.enqueue_many("note", [(i,) for i in range(500)], queue="q")
    pool = pools("-c", "2", "--batch", "20")
    wait_until(lambda: app.stats("q")["processed"] == 500, 60, "the drain")
    assert app.purge("other") == 1
    app.enqueue_many("note", [(i,) for i in range(500, 600)], queue="q")
    wait_until(lambda: app.stats("q")["processed"] == 600, 60, "the second drain")
    # a few looks at the markers by every process, after the drain and the purge
    time.sleep(3 * CHECK_S)
    assert pool.stop() == 0, pool.log()
    assert not losses(pool), pool.log()
    assert "Redis lost its data" not in pool.log()
