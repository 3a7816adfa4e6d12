"""20,000 jobs enqueued over HTTP, through two ``fastq serve`` processes on one
Redis, in batches of 1,000 sent four at a time, and drained by a ``fastq pool``:
each runs once."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env
from tests.support.serve import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOBS = 20_000
BATCH = 1_000


def test_20000_jobs_enqueued_over_http_are_drained_by_a_pool_each_once(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    servers = [
        Server(
            redis_server.url,
            tmp_path / f"serve{i}.log",
            "--app",
            "tests.apps.counting",
            "--namespace",
            namespace,
            "--no-access-log",
        )
        for i in range(2)
    ]
    pool = None
    try:
        clients = [server.started().client() for server in servers]

        def post(start: int) -> list[str]:
            batch = [{"name": "count", "args": [i]} for i in range(start, start + BATCH)]
            # the servers in turn: they hold nothing of their own
            reply = clients[start // BATCH % 2].post("/api/v1/queues/count/jobs", json=batch)
            assert reply.status_code == 200, reply.text
            return reply.json()["ids"]  # type: ignore[no-any-return]

        # four requests at a time, two on each server: each server's threads enqueue
        # side by side (its ids drawn by one producer)
        with ThreadPoolExecutor(4) as senders:
            ids = [i for batch in senders.map(post, range(0, JOBS, BATCH)) for i in batch]
        assert len(set(ids)) == JOBS
        stats = clients[1].get("/api/v1/queues/count").json()["stats"]
        assert (stats["enqueued"], stats["ready"]) == (JOBS, JOBS)
        with open(tmp_path / "pool.log", "ab") as log:
            pool = subprocess.Popen(
                fastq_cmd(
                    "pool",
                    "--app",
                    "tests.apps.counting",
                    "--namespace",
                    namespace,
                    "-q",
                    "count",
                    "-c",
                    "2",
                ),
                env=subprocess_env(redis_server.url),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def drained() -> bool:
            assert pool is not None and pool.poll() is None, (tmp_path / "pool.log").read_text()
            stats = clients[0].get("/api/v1/queues/count").json()["stats"]
            return bool(stats["processed"] == JOBS)

        wait_until(drained, 90, "the pool to drain the queue")
        runs = r.hgetall(f"{namespace}:runs")
        assert len(runs) == JOBS and set(runs.values()) == {b"1"}  # each once
        assert sorted(int(i) for i in runs) == list(range(JOBS))
        stats = clients[0].get("/api/v1/queues/count").json()["stats"]
        assert (stats["ready"], stats["inflight"], stats["dead"], stats["broken"]) == (0, 0, 0, 0)
        assert clients[1].get(f"/api/v1/jobs/{ids[-1]}").json()["state"] == "done"
        for client in clients:
            client.close()
    finally:
        if pool is not None:
            pool.terminate()
            pool.wait(timeout=30)
        for server in servers:
            server.stop()
