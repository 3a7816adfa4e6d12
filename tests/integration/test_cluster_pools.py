"""``fastq pool`` on a real Redis Cluster of 3 masters: the parts a pool adds to
its workers (the reaper child firing periodic jobs, the lease keeper) on queues
that live on different masters."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

import fastq
from fastq.testing.cluster_server import ClusterServer
from tests.support.cluster import queues_on_each_master
from tests.support.periodic import check_each_slot_once, recorded_runs
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = pytest.mark.timeout(60)


class Pools:
    """``fastq pool`` subprocesses of one test on the cluster, stopped at its end."""

    def __init__(self, url: str, namespace: str, log_dir: Path) -> None:
        self.url, self.namespace, self.log_dir = url, namespace, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, app: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"pool{len(self.procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                fastq_cmd("pool", "--app", app, "--namespace", self.namespace, *args),
                env=subprocess_env(self.url, POOL_JOBS_RUNS_FILE=str(self.log_dir / "runs")),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def stop(self) -> list[int]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=15))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        return codes

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))


@pytest.fixture
def pools(redis_cluster: ClusterServer, namespace: str, tmp_path: Path) -> Iterator[Pools]:
    p = Pools(redis_cluster.url, namespace, tmp_path)
    yield p
    p.stop()


def test_two_pools_fire_each_periodic_slot_once(pools: Pools, capp: fastq.App) -> None:
    # no -q: each pool serves the app's queues; its reaper child fires every second
    pools.start("tests.apps.periodic_jobs", "-c", "1")
    pools.start("tests.apps.periodic_jobs", "-c", "1")
    ticks_key = f"{capp.namespace}:ticks"
    deadline = time.monotonic() + 20
    while capp.redis.llen(ticks_key) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pools.stop() == [0, 0], pools.logs()
    started = [slot for slot, _ in recorded_runs(capp.redis, capp.namespace)]
    assert len(started) >= 4, pools.logs()
    # once per slot, and no slot missed between the first and the last
    check_each_slot_once(started, pools.logs())
    assert capp.stats("ticks")["enqueued"] == len(started)


def test_leases_are_extended_on_every_master_while_long_jobs_run(
    redis_cluster: ClusterServer, pools: Pools, capp: fastq.App
) -> None:
    """Jobs that run 2.5 leases: the lease keeper extends them on each queue's
    master, so the reaper (sweeping every lease) takes none back. Leases of 2 s: a
    loaded CI machine left the keeper's thread unscheduled past a lease of 1 s."""
    queues = list(queues_on_each_master(redis_cluster, "lease").values())
    for k, q in enumerate(queues):
        capp.enqueue("work", (k, 5.0), queue=q)
    pools.start("tests.apps.pool_jobs", "-q", ",".join(queues), "-c", "3", "--lease", "2")
    deadline = time.monotonic() + 30
    while sum(capp.stats(q)["processed"] for q in queues) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pools.stop() == [0], pools.logs()
    runs = capp.redis.hgetall(f"{capp.namespace}:runs")
    assert runs == {str(k).encode(): b"1" for k in range(len(queues))}, pools.logs()
    stats = [capp.stats(q) for q in queues]
    assert [(s["processed"], s["stalled"], s["inflight"]) for s in stats] == [(1, 0, 0)] * 3
