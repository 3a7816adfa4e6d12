"""The worker rides out Redis going away: it backs off, reconnects, loses nothing."""

from __future__ import annotations

import subprocess
import time
from typing import Iterator

import psutil
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env
from tests.support.workers import drain

pytestmark = pytest.mark.fault


@pytest.fixture
def durable_server() -> Iterator[RedisServer]:
    """A server of this test's own, with every write fsynced, so kill -9 keeps it all."""
    server = RedisServer(appendonly=True).start()
    yield server
    server.cleanup()


def test_redis_restarted_between_two_batches(durable_server: RedisServer) -> None:
    app = fastq.App(durable_server.url, namespace="restart")
    runs: dict[int, int] = {}

    @app.job(queue="q")
    def work(i: int) -> None:
        runs[i] = runs.get(i, 0) + 1
        if i in (250, 600):  # mid-batch: the ack of this batch meets a fresh server
            durable_server.restart()

    work.enqueue_many([(i,) for i in range(1000)])
    drain(app, ["q"], batch_size=100)
    assert runs == {i: 1 for i in range(1000)}
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (1000, 0, 0)
    app.close()


def test_worker_backs_off_while_redis_is_down_then_carries_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = RedisServer(appendonly=True)  # not started yet: the worker finds nobody
    log_path = tmp_path / "worker.log"
    ns = "downtime"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            fastq_cmd("worker", "--app", "tests.apps.counting", "--namespace", ns, "-q", "count"),
            env=subprocess_env(server.url),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # its start is not timed (a loaded machine took over 3 s to import it)
        wait_until(lambda: "Redis unavailable" in log_path.read_text(), 30, "the outage noted")
        before = psutil.Process(proc.pid).cpu_times()
        time.sleep(2.5)
        assert proc.poll() is None, log_path.read_text()
        # one line when the outage starts, not one per retry, and no busy retrying
        assert log_path.read_text().count("Redis unavailable") == 1, log_path.read_text()
        after = psutil.Process(proc.pid).cpu_times()
        assert (after.user + after.system) - (before.user + before.system) < 0.5
        server.start()
        app = fastq.App(server.url, namespace=ns)
        app.enqueue_many("count", [(i,) for i in range(200)], queue="count")
        client = redis.Redis.from_url(server.url)
        deadline = time.monotonic() + 20
        while client.hlen(f"{ns}:runs") < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        runs = {int(k): int(v) for k, v in client.hgetall(f"{ns}:runs").items()}
        assert runs == {i: 1 for i in range(200)}
        assert log_path.read_text().count("Redis back after") == 1, log_path.read_text()
        client.close()
        app.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
        server.cleanup()
