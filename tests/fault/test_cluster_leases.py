"""A Redis Cluster while one master stalls (SIGSTOP), without replicas: a worker's
new clients are made from the masters that answer, and the lease keeper of a worker
serving queues on several masters keeps extending the leases it holds on those, so
their long jobs are never taken back and run twice."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

import fastq
from fastq.context import ProgressBuffer
from fastq.protocol.contracts import CLAIM
from fastq.protocol.shards import shards_key
from fastq.reaper.reaper import Reaper
from fastq.testing.cluster_server import ClusterServer
from fastq.testing.redis_server import RedisServer
from fastq.worker.leases import LeaseKeeper
from tests.support.cluster import port_of, queues_on_each_master
from tests.support.pool import Pool, noted_runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

LEASE_S = 2.0
STALL_S = 3 * LEASE_S
JOB_S = STALL_S + 4.0


@pytest.fixture(scope="module")
def stallable_cluster() -> Iterator[ClusterServer]:
    """A cluster of its own (a master of it is stopped), without replicas: nothing
    fails over. Its node timeout outlasts the stall, so the other masters keep
    serving their slots meanwhile, as a production cluster (15 s by default) does
    through a shorter stall."""
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed: it creates the Redis Cluster (redis-tools)")
    with ClusterServer(3, node_timeout_ms=60_000) as cluster:
        yield cluster


def lease_deadlines(
    cluster: ClusterServer, port: int, app: fastq.App, queue: str
) -> tuple[int, list[int]]:
    """(now, the lease deadline of each worker holding jobs of ``queue``), in ms by
    the clock of its master at ``port``, which the reaper goes by."""
    node = cluster.client(port)
    try:
        seconds, micros = node.time()
        deadlines = node.zrange(app.keys(queue).leases, 0, -1, withscores=True)
    finally:
        node.close()
    return seconds * 1000 + micros // 1000, [int(score) for _, score in deadlines]


@contextmanager
def stopped(node: RedisServer) -> Iterator[None]:
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(node.process.pid, signal.SIGCONT)


def test_a_client_is_made_while_any_one_master_stalls(
    stallable_cluster: ClusterServer, namespace: str
) -> None:
    """As a worker makes its clients (its lease keeper's a quarter of a lease in):
    with no retries, and call timeouts of a tenth of a 2 s lease."""
    app = fastq.App(stallable_cluster.url, namespace=namespace)
    for node in stallable_cluster.nodes:
        with stopped(node):
            started = time.monotonic()
            client = app.new_client(retries=0, socket_timeout_s=0.2, connect_timeout_s=0.2)
            took_s = time.monotonic() - started
            client.close()
        assert took_s < 1.0, f"{took_s:.1f} s with {node.port} stalled"


def hgetall(cluster: ClusterServer, port: int, key: str) -> dict[bytes, bytes]:
    node = cluster.client(port)
    try:
        return node.hgetall(key)  # type: ignore[return-value]
    finally:
        node.close()


def test_progress_reaches_the_masters_that_answer(
    stallable_cluster: ClusterServer, namespace: str
) -> None:
    """The reports of a stalled master's queue wait for the next beat; the others
    are written at once."""
    cluster = stallable_cluster
    owners = queues_on_each_master(cluster, "progress")
    victim_port = min(owners)
    app = fastq.App(cluster.url, namespace=namespace)
    progress = ProgressBuffer()
    keeper = LeaseKeeper(
        lambda: app.new_client(retries=0, socket_timeout_s=0.2, connect_timeout_s=0.2),
        "w1",
        [app.keys(q) for q in owners.values()],
        2000,
        progress,
    )
    try:
        for queue in owners.values():
            progress.report(queue, b"job", b'"half"')
        with stopped(next(node for node in cluster.nodes if node.port == victim_port)):
            keeper.send_progress()
            written = {
                port: hgetall(cluster, port, app.keys(queue).progress)
                for port, queue in owners.items()
                if port != victim_port
            }
        assert written == {port: {b"job": b'"half"'} for port in owners if port != victim_port}
        assert progress.take() == {owners[victim_port]: {b"job": b'"half"'}}
    finally:
        if keeper.client is not None:
            keeper.client.close()
        app.close()


def done(app: fastq.App, queue: str) -> bool:
    """Has ``queue`` a job done and none waiting or running?"""
    stats = app.stats(queue)
    return stats["processed"] >= 1 and stats["ready"] == stats["inflight"] == 0


def test_a_stalled_master_costs_no_lease_on_the_other_masters(
    stallable_cluster: ClusterServer, namespace: str, tmp_path: Path
) -> None:
    cluster = stallable_cluster
    owners = queues_on_each_master(cluster, "lease")
    # the victim holds none of the namespace's own keys, which a reaper reads
    shards_port = port_of(cluster, shards_key(namespace))
    victim_port = next(port for port in sorted(owners) if port != shards_port)
    stalled = owners[victim_port]
    # where the healthy queues live, asked before the stall (a stopped node never answers)
    healthy_ports = {q: port for port, q in owners.items() if port != victim_port}
    healthy = list(healthy_ports)
    victim = next(node for node in cluster.nodes if node.port == victim_port)
    app = fastq.App(cluster.url, namespace=namespace)
    for i, queue in enumerate(healthy):
        app.enqueue("note", (i, JOB_S), queue=queue)
    # A reaper elsewhere, sweeping the healthy queues: the pool's own would sweep the
    # stalled master's queue too, and hold back every lease until it answers.
    reaper = Reaper(app, healthy, interval_s=0.1, handle_signals=False)
    reaping = threading.Thread(target=reaper.run)
    reaping.start()
    # the stalled master's queue first: the one each lease keeper extends first
    pool = Pool(
        cluster.url,
        namespace,
        tmp_path / "pool.log",
        "-q",
        ",".join([stalled, *healthy]),
        "-c",
        str(len(healthy)),
        "--batch",
        "1",
        "--lease",
        str(LEASE_S),
        "--no-reaper",
    )
    lapsed: list[tuple[str, int, list[int]]] = []
    try:
        wait_until(
            lambda: all(app.stats(q)["inflight"] == 1 for q in healthy), 20, "the jobs to start"
        )
        with stopped(victim):
            stall_ends = time.monotonic() + STALL_S
            while time.monotonic() < stall_ends:
                for queue in healthy:
                    now_ms, deadlines = lease_deadlines(cluster, healthy_ports[queue], app, queue)
                    if len(deadlines) != 1 or deadlines[0] <= now_ms:
                        lapsed.append((queue, now_ms, deadlines))
                time.sleep(0.1)
        wait_until(lambda: all(done(app, q) for q in healthy), 4 * JOB_S, "the jobs to end")
        assert pool.stop() == 0, pool.log()
        stats = [app.stats(q) for q in healthy]
    finally:
        pool.kill()
        reaper.stop()
        reaping.join(timeout=30)
        app.close()
    assert noted_runs(pool) == {i: 1 for i in range(len(healthy))}, pool.log()
    assert [(s["processed"], s["stalled"]) for s in stats] == [(1, 0)] * len(healthy)
    assert lapsed == [], pool.log()  # each lease was extended on time, all along


def ready_and_held(
    cluster: ClusterServer, port: int, app: fastq.App, queue: str
) -> tuple[int, int]:
    """(jobs ready, workers holding a lease) of ``queue``, asked of its master at ``port``."""
    node = cluster.client(port)
    try:
        keys = app.keys(queue)
        return node.llen(keys.ready), node.zcard(keys.leases)
    finally:
        node.close()


def test_a_stalled_master_keeps_no_lapsed_lease_on_the_others(
    stallable_cluster: ClusterServer, namespace: str
) -> None:
    """The reaper sweeps the stalled master's queue first; meanwhile a worker on
    another master dies holding jobs: they are taken back within seconds."""
    cluster = stallable_cluster
    owners = queues_on_each_master(cluster, "reap")
    shards_port = port_of(cluster, shards_key(namespace))  # the reaper reads it
    victim_port = next(port for port in sorted(owners) if port != shards_port)
    victim = next(node for node in cluster.nodes if node.port == victim_port)
    healthy = {port: q for port, q in owners.items() if port != victim_port}
    app = fastq.App(cluster.url, namespace=namespace)
    reaper = Reaper(app, [owners[victim_port], *healthy.values()], handle_signals=False)
    reaping = threading.Thread(target=reaper.run)
    try:
        for queue in healthy.values():
            app.enqueue_many("note", [(i, 0) for i in range(3)], queue=queue, delay_s=0.5)
        reaping.start()
        # promoted by the reaper: it swept, its client made while every master answered
        wait_until(
            lambda: all(ready_and_held(cluster, p, app, q) == (3, 0) for p, q in healthy.items()),
            10,
            "the reaper to promote the delayed jobs",
        )
        with stopped(victim):
            # a worker that dies as it claimed: its lease lapses in a second
            for queue in healthy.values():
                claimed = CLAIM.call(
                    app.redis,
                    CLAIM.keys_for(app.keys(queue), "w-dead"),
                    CLAIM.argv("w-dead", 3, 1000, 100),
                )
                assert len(claimed.ids) == 3
            wait_until(
                lambda: all(
                    ready_and_held(cluster, port, app, queue) == (3, 0)
                    for port, queue in healthy.items()
                ),
                8,
                "the dead worker's jobs to be taken back",
            )
    finally:
        reaper.stop()
        reaping.join(timeout=60)
        app.close()
    assert not reaping.is_alive()


def tick() -> None:
    pass


def test_a_stalled_master_keeps_no_periodic_job_of_the_others_from_firing(
    stallable_cluster: ClusterServer, namespace: str
) -> None:
    """The stalled master's schedule is the one the reaper fires first; the other
    masters' schedules fire on time all along."""
    cluster = stallable_cluster
    owners = queues_on_each_master(cluster, "tick")
    shards_port = port_of(cluster, shards_key(namespace))
    victim_port = next(port for port in sorted(owners) if port != shards_port)
    victim = next(node for node in cluster.nodes if node.port == victim_port)
    healthy = {port: q for port, q in owners.items() if port != victim_port}
    app = fastq.App(cluster.url, namespace=namespace)
    for i, queue in enumerate([owners[victim_port], *healthy.values()]):
        app.periodic(every_s=1, queue=queue, overlap=True, name=f"tick{i}")(tick)
    reaper = Reaper(app, list(owners.values()), handle_signals=False)
    reaping = threading.Thread(target=reaper.run)

    def fired() -> list[int]:
        return [ready_and_held(cluster, port, app, queue)[0] for port, queue in healthy.items()]

    try:
        reaping.start()
        wait_until(lambda: min(fired()) >= 1, 10, "the first slots to fire")
        with stopped(victim):
            before = fired()
            time.sleep(5.0)
            during = fired()
    finally:
        reaper.stop()
        reaping.join(timeout=60)
        app.close()
    assert not reaping.is_alive()
    # a slot a second, but for the first call to the stalled master (2 s at most)
    assert [n - b >= 3 for n, b in zip(during, before)] == [True] * len(healthy), (before, during)
