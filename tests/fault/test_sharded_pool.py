"""``fastq pool`` on a sharded queue: the pool's app (``tests.apps.pool_jobs``)
registers queue ``q`` unsharded, so its workers, master and reaper learn the
shards from Redis' record, written by the producer's declaration. Children
SIGKILLed mid-drain have their jobs handed back from every shard; a lost host's
leases are taken back by a reaper that sweeps every shard."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

import fastq
from fastq.protocol.keys import shard_names
from fastq.testing.redis_server import RedisServer
from tests.support.pool import (
    Pool,
    kill_children_while,
    lose_host,
    recover_lost_host,
    runs,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]


@pytest.fixture
def cluster_app(redis_cluster: Any, namespace: str) -> Iterator[fastq.App]:
    a = fastq.App(redis_cluster.url, namespace=namespace)
    yield a
    a.close()


SHARDS = 4


def processed_by_shard(app: fastq.App) -> list[int]:
    return [
        int(app.redis.hget(app.keys(name).stats, "processed") or 0)
        for name in shard_names("q", SHARDS)
    ]


def test_sigkill_children_while_draining_a_sharded_queue(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n, batch = 4000, 50
    app.declare_queue("q", shards=SHARDS)
    # 3 ms jobs on 4 children: 80% takes 2.4 s at least, whatever fastq's speed,
    # three times the 4 kills' 0.8 s (16,000 no-op jobs held only on a slow box)
    app.enqueue_many("work", [(i, 0.003) for i in range(n)], queue="q")
    assert app.stats("q")["shards"] == SHARDS
    # leases outlast the test: only the master's hand-backs can bring jobs back
    pool = pools("-c", "4", "--batch", str(batch), "--lease", "300")
    pool.wait_children(4)
    kills = kill_children_while(
        pool.children, lambda: app.stats("q")["processed"] < n * 0.8, max_kills=4, every_s=0.2
    )
    wait_until(lambda: app.stats("q")["processed"] == n, 90, "the drain")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(n)), "a job was lost"
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["dead"]) == (n, 0, 0, 0)
    duplicates = sum(v - 1 for v in ran.values())
    assert duplicates <= stats["stalled"] + stats["orphaned"] <= kills * 2 * batch
    assert processed_by_shard(app) == [n // SHARDS] * SHARDS
    assert kills >= 3, "the drain ended before the test could kill anything"


def test_a_lost_host_leases_come_back_from_every_shard(
    app: fastq.App,
    r: redis.Redis,
    pools: Callable[..., Pool],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    n = 400
    app.declare_queue("q", shards=SHARDS)
    ids = [f"job-{i}" for i in range(n)]  # ids given: each to its own id's shard
    app.enqueue_many("work", [(i, 0.02) for i in range(n)], queue="q", job_ids=ids)
    first = pools("-c", "4", "--batch", "5", "--lease", "2")
    workers = first.wait_children(4)
    wait_until(lambda: app.stats("q")["processed"] >= 50, 30, "some progress")
    lose_host(first, workers)
    leased = app.stats("q")["inflight"]
    holding = [name for name in shard_names("q", SHARDS) if r.zcard(app.keys(name).leases)]
    assert leased > 0 and len(holding) >= 2, holding
    recover_lost_host(app, r, redis_server.url, pools, n, leased)


def test_sigkill_children_mid_drain_of_a_sharded_queue_on_a_cluster(
    redis_cluster: Any, cluster_app: fastq.App, tmp_path: Path
) -> None:
    """The same on a real Redis Cluster: the queue's 8 shards live on 3 masters; the
    master's hand-backs reach every shard's own master."""
    app = cluster_app
    shards, batch = 8, 50
    n = shards * 400
    app.declare_queue("q", shards=shards)
    # 2 ms jobs on 3 children: 80% takes 1.7 s at least, whatever fastq's speed,
    # near three times the 4 kills' 0.6 s
    app.enqueue_many("work", [(i, 0.002) for i in range(n)], queue="q")
    pool = Pool(
        redis_cluster.url,
        app.namespace,
        tmp_path / "pool.log",
        "-c",
        "3",
        "--batch",
        str(batch),
        "--lease",
        "300",
    )
    try:
        pool.wait_children(3)
        kills = kill_children_while(
            pool.children, lambda: app.stats("q")["processed"] < n * 0.8, max_kills=4, every_s=0.15
        )
        wait_until(lambda: app.stats("q")["processed"] == n, 60, "the drain")
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    ran = {int(k): int(v) for k, v in app.redis.hgetall(f"{app.namespace}:runs").items()}
    assert set(ran) == set(range(n)), "a job was lost"
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["dead"]) == (n, 0, 0, 0)
    duplicates = sum(v - 1 for v in ran.values())
    assert duplicates <= stats["stalled"] + stats["orphaned"] <= kills * 2 * batch
    assert kills >= 3, "the drain ended before the test could kill anything"
