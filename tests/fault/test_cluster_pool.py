"""``fastq pool`` on a real Redis Cluster of 3 masters under faults: children
SIGKILLed mid-drain of queues spread over every master. The contract of the
single-Redis tests holds: each job ran at least once, none was lost, and re-runs
stay within what the killed children held."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import fastq
from fastq.testing.cluster_server import ClusterServer
from tests.support.cluster import queues_on_each_master, replicas_caught_up
from tests.support.pool import Pool, kill_children_while, noted_runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


def processed(app: fastq.App, queues: list[str]) -> int:
    return sum(app.stats(q)["processed"] for q in queues)


def test_sigkill_children_mid_drain_of_queues_on_every_master(
    redis_cluster: ClusterServer, capp: fastq.App, tmp_path: Path
) -> None:
    queues = list(queues_on_each_master(redis_cluster, "k").values())
    per_queue, batch, job_s = 1000, 50, 0.002
    n = per_queue * len(queues)
    # the jobs set how long the drain lasts, not fastq's speed (no-op jobs drained
    # before the third kill on a quiet machine): 3 children running 2 ms jobs take
    # 1.6 s at least to reach 80%, over twice the 4 kills' 0.6 s (4: a fifth death
    # in 10 s would idle the pool for the master's crash-loop backoff, up to 4 s)
    for k, q in enumerate(queues):
        calls = [(k * per_queue + i, job_s) for i in range(per_queue)]
        capp.enqueue_many("work", calls, queue=q)
    pool = Pool(
        redis_cluster.url,
        capp.namespace,
        tmp_path / "pool.log",
        "-q",
        ",".join(queues),
        "-c",
        "3",
        "--batch",
        str(batch),
    )
    try:
        pool.wait_children(3)
        # kill only once the children work: on a loaded machine the first kills met
        # children still importing, which held nothing to hand back
        wait_until(lambda: processed(capp, queues) >= n * 0.1, 30, "the drain to start")
        kills = kill_children_while(
            pool.children, lambda: processed(capp, queues) < n * 0.8, max_kills=4, every_s=0.15
        )
        wait_until(lambda: processed(capp, queues) == n, 60, "the drain")
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    ran = {int(k): int(v) for k, v in capp.redis.hgetall(f"{capp.namespace}:runs").items()}
    assert set(ran) == set(range(n)), "a job was lost"
    duplicates = sum(v - 1 for v in ran.values())
    stats = [capp.stats(q) for q in queues]
    assert [(s["processed"], s["ready"], s["inflight"], s["dead"]) for s in stats] == [
        (per_queue, 0, 0, 0)
    ] * len(queues)
    handed_back = sum(s["stalled"] + s["orphaned"] for s in stats)
    # a child holds at most two batches: the one running and the one prefetched
    assert duplicates <= handed_back <= kills * 2 * batch
    print(f"{kills} kills, {duplicates} re-runs, {handed_back} handed back")
    assert kills >= 3, "the drain ended before the test could kill anything"
    assert "handed back" in pool.log()  # by the master, on each queue's own master


def settled(app: fastq.App, queues: list[str]) -> bool:
    try:
        return all(app.stats(q)["ready"] == app.stats(q)["inflight"] == 0 for q in queues)
    except fastq.RedisUnavailable:  # the producer's client meets the failover too
        return False


def test_a_master_fails_over_mid_drain_and_the_pool_carries_on(
    redis_cluster_replicas: ClusterServer, namespace: str, tmp_path: Path
) -> None:
    cluster = redis_cluster_replicas
    owners = queues_on_each_master(cluster, "fo")
    queues = list(owners.values())
    per_queue = 1500
    n = per_queue * len(queues)
    app = fastq.App(cluster.url, namespace=namespace)
    victim = next(node for node in cluster.nodes if node.port == min(owners))
    pool = None
    try:
        for k, q in enumerate(queues):
            calls = [(k * per_queue + i, 0.002) for i in range(per_queue)]
            app.enqueue_many("note", calls, queue=q)
        # a job the cluster kept: on the replica that takes over as well
        wait_until(lambda: replicas_caught_up(cluster), 10, "the replicas")
        pool = Pool(
            cluster.url,
            namespace,
            tmp_path / "pool.log",
            "-q",
            ",".join(queues),
            "-c",
            "3",
            "--batch",
            "20",
        )
        wait_until(lambda: len(noted_runs(pool)) >= n // 4, 30, "some progress")
        victim.kill()  # its replica takes over after cluster-node-timeout (2 s)
        time.sleep(0.3)
        random.choice(pool.wait_children(3)).kill()  # its hand-back waits for the cluster
        wait_until(lambda: set(noted_runs(pool)) >= set(range(n)), 60, "every job to run")
        wait_until(lambda: settled(app, queues), 20, "every queue to settle")
        assert pool.proc.poll() is None, pool.log()  # the pool never restarted
        assert pool.stop() == 0, pool.log()
    finally:
        if pool is not None:
            pool.kill()
        app.close()
        victim.start()  # back as a replica of its successor, for the tests that follow
        cluster.wait_ok()
    log = pool.log()
    assert "Traceback" not in log, log
    assert log.count("died (signal SIGKILL)") == 1, log  # ours: no child crashed
    assert "Redis back after" in log  # the children waited out the failover
    reruns = sum(noted_runs(pool).values()) - n
    print(f"{reruns} re-runs after a failover and a child killed")
