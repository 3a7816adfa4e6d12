"""Rolling deploys: a job whose name the worker's app does not register (a newer
deploy's) goes back to its queue with a delay, its attempts unchanged, for a grace
period; a worker of the new code runs it once it starts; only past the grace is it
broken. Real pools and workers of two versions of one app (tests.apps.deploy_jobs)."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env

DEPLOY_APP = "tests.apps.deploy_jobs"


class Procs:
    """The fastq processes a test starts (stopped at its end, whatever happens)."""

    def __init__(self, url: str, namespace: str, tmp_path: Path) -> None:
        self.url, self.namespace, self.tmp_path = url, namespace, tmp_path
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, version: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log_path = self.tmp_path / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                fastq_cmd(
                    *args, "--app", DEPLOY_APP, "--namespace", self.namespace, "-q", "deploy"
                ),
                env=subprocess_env(self.url, DEPLOY_VERSION=version),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started.append(proc)
        return proc, log_path

    def stop(self, proc: subprocess.Popen[bytes]) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def procs(redis_server: RedisServer, namespace: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(redis_server.url, namespace, tmp_path)
    yield p
    p.kill_all()


def runs(r: redis.Redis, namespace: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(f"{namespace}:runs").items()}


def test_a_new_job_waits_for_the_new_pool_and_runs_once(
    app: fastq.App, r: redis.Redis, procs: Procs
) -> None:
    old, old_log = procs.start("old", "old", "pool", "-c", "2")
    app.declare_queue("deploy")
    app.enqueue_many("old_job", [(i,) for i in range(5)], queue="deploy")
    wait_until(lambda: len(runs(r, procs.namespace)) == 5, 60, "the old pool's jobs")
    # the new code's job, enqueued while only old workers run: they put it back
    # (with a delay), again and again, and never break it
    ids = app.enqueue_many("welcome", [(i,) for i in range(3)], queue="deploy")
    wait_until(lambda: app.stats("deploy")["retried"] >= 2 * len(ids), 60, "put back twice")
    infos = [app.get_job(job_id, "deploy") for job_id in ids]
    for info in infos:
        assert info is not None and info.state in ("scheduled", "queued", "active"), info
        assert info.attempts == 0  # a job put back is not an attempt
    stats = app.stats("deploy")
    assert (stats["broken"], stats["dead"], stats["failed"]) == (0, 0, 0)
    # the deploy rolls: the new pool starts, then the old one stops
    new, _ = procs.start("new", "new", "pool", "-c", "2")
    procs.stop(old)
    wait_until(lambda: len(runs(r, procs.namespace)) == 8, 120, "the new job's runs")
    assert procs.stop(new) == 0
    assert runs(r, procs.namespace) == {
        **{f"old_job-{i}": 1 for i in range(5)},
        **{f"welcome-{i}": 1 for i in range(3)},
    }
    stats = app.stats("deploy")
    assert (stats["processed"], stats["broken"], stats["dead"], stats["failed"]) == (8, 0, 0, 0)
    assert (stats["ready"], stats["scheduled"], stats["inflight"]) == (0, 0, 0)
    # each old worker said so once, naming the job, its queue and when it breaks
    warnings = re.findall(r"WARNING fastq\.worker: .*job name 'welcome' .*", old_log.read_text())
    assert 1 <= len(warnings) <= 2, warnings  # once per process at most: two children
    assert "of queue deploy" in warnings[0] and " is broken at " in warnings[0]


def test_past_the_grace_period_the_job_is_broken_with_the_reason(
    app: fastq.App, r: redis.Redis, procs: Procs
) -> None:
    worker, log_path = procs.start("old", "old", "worker", "--unknown-job-grace", "2s")
    app.declare_queue("deploy")
    started = time.monotonic()
    job_id = app.enqueue("welcome", (1,), queue="deploy")

    def state() -> str:
        info = app.get_job(job_id, "deploy")
        return info.state if info is not None else "gone"

    wait_until(lambda: state() == "broken", 60, "the job broken")
    # not before the grace period: it went back at least once meanwhile
    assert time.monotonic() - started >= 2.0
    info = app.get_job(job_id, "deploy")
    assert info is not None and info.broken_reason is not None
    assert info.broken_reason.startswith("unknown job name 'welcome': ")
    assert "grace period" in info.broken_reason
    assert procs.stop(worker) == 0
    stats = app.stats("deploy")
    assert stats["retried"] >= 1
    assert (stats["broken"], stats["dead"], stats["ready"], stats["scheduled"]) == (1, 0, 0, 0)
    assert runs(r, procs.namespace) == {}
    # the broken set is what `fastq broken retry` works from: once the app knows
    # the job, it runs
    assert app.retry_broken("deploy") == (1, 0)
    info = app.get_job(job_id, "deploy")  # a new run: a new grace period
    assert info is not None and info.state == "queued" and b"unknown_since" not in info.raw
    new, _ = procs.start("new", "new", "worker")
    wait_until(lambda: runs(r, procs.namespace) == {"welcome-1": 1}, 60, "the retried job's run")
    assert procs.stop(new) == 0
    said = log_path.read_text()
    assert len(re.findall(r"WARNING fastq\.worker: .*job name 'welcome' ", said)) == 1, said
    assert "is broken, quarantined: unknown job name 'welcome'" in said
