"""Batches under faults, on real pools: children SIGKILLed every half second, the
pool's reaper killed, a Redis Cluster master failed over, producers in eight
processes adding to one batch, a cancel mid-drain. Whatever happens, a batch's
``on_complete`` runs once, after its last job ended, and sees the counts of what
happened; ``on_success`` of a batch with a dead job never runs.

Runs are counted in a file the jobs append to (``tests/apps/batch_jobs.py``).

"Exactly once", honestly: a callback is a job, and fastq runs jobs at least once;
a SIGKILL that lands on the callback's own run would run it again, as it would
any job. So the killers here never kill a child that has started a callback:
they stop the victim (SIGSTOP), read the runs file, and kill it only if it has
noted no callback start; else they let it go on (SIGCONT). A kill may still land
on a child that claimed the callback but had not begun it, a run that did nothing
(the callback's first statement notes its start). What is then asserted exactly
is what a user relies on: the callback job was enqueued once (one id, a single
job in its queue's counts), its body ran once, to the end, and on_success's id
never existed.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import psutil
import pytest
import redis

import fastq
from fastq.protocol.batches import BatchStatus
from fastq.testing.cluster_server import ClusterServer
from fastq.testing.redis_server import RedisServer
from tests.apps import batch_jobs
from tests.apps.batch_jobs import Runs, read_runs
from tests.support.cluster import port_of, queues_on_each_master, replicas_caught_up
from tests.support.pool import Pool, gone, wait_until
from tests.support.processes import ROOT, subprocess_env

pytestmark = [pytest.mark.fault, pytest.mark.timeout(150)]

APP = "tests.apps.batch_jobs"


def start_pool(url: str, namespace: str, tmp_path: Path, queues: list[str], *args: str) -> Pool:
    env = {
        "BATCH_JOBS_RUNS_FILE": str(tmp_path / "runs.txt"),
        "BATCH_JOBS_QUEUES": ",".join(queues),
    }
    return Pool(
        url,
        namespace,
        tmp_path / "pool.log",
        "-q",
        ",".join([*queues, "cb"]),
        *args,
        app=APP,
        env=env,
    )


def status_of(app: fastq.App, batch_id: str) -> Optional[BatchStatus]:
    """The batch's status; None while Redis cannot say (a master failing over)."""
    try:
        return app.batch_status(batch_id)
    except (fastq.FastqError, redis.RedisError):
        return None


def ended(app: fastq.App, batch_id: str) -> bool:
    status = status_of(app, batch_id)
    return status is not None and status.state == "ended"


def kill_unless_in_callback(victim: psutil.Process, runs_file: Path) -> bool:
    """SIGKILL ``victim`` unless it has started a callback (see the module's doc):
    stopped first, so that it cannot start one between the look and the kill.
    Returns whether it was killed."""
    try:
        victim.suspend()
        wait_until(lambda: gone(victim) or victim.status() == psutil.STATUS_STOPPED, 5, "SIGSTOP")
        if victim.pid in {pid for _, pid in read_runs(runs_file).starts}:
            victim.resume()
            return False
        victim.kill()
        return True
    except psutil.NoSuchProcess:
        return False


def kill_until_ended(
    app: fastq.App,
    pool: Pool,
    batch_id: str,
    runs_file: Path,
    total: int,
    *,
    reaper_at: tuple[float, ...] = (),
    every_s: float = 0.5,
    max_kills: int = 1000,
    timeout_s: float = 90,
) -> tuple[int, int]:
    """Every ``every_s`` until the batch has ended: SIGKILL a worker child (at most
    ``max_kills``), and the reaper once each fraction of ``reaper_at`` of the items
    has run. Returns (workers killed, reapers killed)."""
    kills = reapers = 0
    deadline = time.monotonic() + timeout_s
    while not ended(app, batch_id):
        assert time.monotonic() < deadline, f"the batch did not end: {status_of(app, batch_id)}"
        time.sleep(every_s)  # the pace of the faults, not a wait for anything
        if (
            reapers < len(reaper_at)
            and len(read_runs(runs_file).items) >= total * reaper_at[reapers]
        ):
            found = pool.children("reaper")
            if found and not ended(app, batch_id):
                found[0].kill()
                reapers += 1
        victims = pool.children()
        if kills < max_kills and victims and not ended(app, batch_id):
            kills += kill_unless_in_callback(random.choice(victims), runs_file)
    return kills, reapers


def called_back(app: fastq.App, runs_file: Path, timeout_s: float = 30) -> Runs:
    """Once the callback has run to its end and its ack is in: the runs file."""
    wait_until(lambda: read_runs(runs_file).ended("complete"), timeout_s, "on_complete")

    def acked() -> bool:
        try:
            stats = app.stats("cb")
        except (fastq.FastqError, redis.RedisError):  # a master failing over
            return False
        return stats["processed"] >= 1 and stats["inflight"] == 0

    wait_until(acked, timeout_s, "on_complete's ack")
    return read_runs(runs_file)


def check_called_back_once(
    app: fastq.App,
    runs: Runs,
    batch_id: str,
    expected: dict[str, int],
    queues: list[str],
    drained: bool = True,
) -> dict[str, Any]:
    """on_complete ran once, to its end, after every job ended, and was told
    ``expected`` (total, done, dead, cancelled, failed); on_success never existed.
    When it ran, ``queues`` held no job (``drained``: none queued either; a
    cancelled job's id stays in the ready list until a claim pops it). Returns
    what the callback saw."""
    assert len(runs.started("complete")) == 1, runs.starts
    (seen,) = runs.ended("complete")
    status = seen["status"]
    assert status["id"] == batch_id
    assert {k: status[k] for k in expected} == expected
    # when it ran: every job had ended, nothing of the batch was queued or held
    assert seen["batch"]["state"] == "ended" and seen["batch"]["pending"] == 0, seen
    assert seen["ran"] == len(runs.items), seen
    for q in queues:
        assert seen["queues"][q]["inflight"] == 0, seen
        assert seen["queues"][q]["ready"] == 0 or not drained, seen
    cb = app.stats("cb")
    assert (cb["processed"], cb["ready"], cb["inflight"], cb["dead"]) == (1, 0, 0, 0), cb
    job = app.get_job(f"{batch_id}.complete")
    assert job is not None and job.state == "done", job
    assert runs.started("success") == [] and runs.ended("success") == []
    assert app.get_job(f"{batch_id}.success") is None
    return seen


N, FAIL_EVERY, JOB_S = 5000, 50, 0.003


def test_a_blast_under_child_and_reaper_kills_calls_back_once(
    redis_server: RedisServer, app: fastq.App, namespace: str, tmp_path: Path
) -> None:
    runs_file = tmp_path / "runs.txt"

    with app.batch(
        on_complete=batch_jobs.report, on_success=batch_jobs.notify, description="blast"
    ) as batch:
        calls = [(i, i % FAIL_EVERY == 0, JOB_S) for i in range(N)]
        app.enqueue_many("item", calls, queue="b")
    failing = N // FAIL_EVERY
    # 4 children, 3 ms jobs: 3.75 s at least, time for 7 kills and both reaper kills
    pool = start_pool(redis_server.url, namespace, tmp_path, ["b"], "-c", "4", "--batch", "20")
    try:
        pool.wait_children(4)
        kills, reapers = kill_until_ended(app, pool, batch.id, runs_file, N, reaper_at=(0.25, 0.6))
        runs = called_back(app, runs_file)
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    runs = read_runs(runs_file)
    print(f"{kills} children and {reapers} reapers killed; {sum(runs.items.values()) - N} re-runs")
    assert kills >= 3 and reapers == 2, "the batch ended before the test could kill enough"
    assert set(runs.items) == set(range(N)), "an item never ran"
    # a killed child re-runs the job in its hand; of those it finished, the master
    # acknowledges the ones that succeeded (its ring of finished jobs notes those
    # only): a failing one whose ack was not in runs again, and fails again. A claim
    # of 20 holds one failing item at most, a child two claims (one fetched ahead).
    reruns = Counter(i % FAIL_EVERY == 0 for i, k in runs.items.items() for _ in range(k - 1))
    assert reruns[False] <= kills and reruns[True] <= 2 * kills, reruns
    expected = {"total": N, "done": N - failing, "dead": failing, "cancelled": 0}
    check_called_back_once(app, runs, batch.id, {**expected, "failed": failing}, ["b"])
    status = app.batch_status(batch.id)
    assert status is not None
    assert (status.state, status.pending, status.failed) == ("ended", 0, failing)
    assert {k: getattr(status, k) for k in expected} == expected
    stats = app.stats("b")
    assert (stats["processed"], stats["dead"], stats["ready"], stats["inflight"]) == (
        N - failing,
        failing,
        0,
        0,
    )


def batch_id_away_from(cluster: ClusterServer, port: int) -> str:
    """A batch id whose hash slot (its hash's key is tagged with the id) is on
    another master than ``port``."""
    return next(f"blast-{i}" for i in range(1000) if port_of(cluster, f"blast-{i}") != port)


@pytest.mark.parametrize("failing_over", ["batch", "queue"])
def test_a_blast_on_a_cluster_calls_back_once_through_a_failover(
    redis_cluster_replicas: ClusterServer, namespace: str, tmp_path: Path, failing_over: str
) -> None:
    cluster = redis_cluster_replicas
    owners = queues_on_each_master(cluster, "bq")
    queue_port = min(owners)
    queue = owners[queue_port]
    batch_id = batch_id_away_from(cluster, queue_port)
    victim_port = queue_port if failing_over == "queue" else port_of(cluster, batch_id)
    assert port_of(cluster, batch_id) != queue_port
    victim = next(node for node in cluster.nodes if node.port == victim_port)
    runs_file = tmp_path / "runs.txt"
    n, failing_every = 3000, 50
    failing = n // failing_every

    app = fastq.App(cluster.url, namespace=namespace)
    pool = None
    try:
        with app.batch(on_complete=batch_jobs.report, on_success=batch_jobs.notify, id=batch_id):
            calls = [(i, i % failing_every == 0, 0.002) for i in range(n)]
            app.enqueue_many("item", calls, queue=queue)
        wait_until(lambda: replicas_caught_up(cluster), 10, "the replicas")
        pool = start_pool(cluster.url, namespace, tmp_path, [queue], "-c", "3", "--batch", "20")
        pool.wait_children(3)
        # the master goes once most items ran: the batch's end falls in the failover
        # (cluster-node-timeout 2 s), so that settling it fails and is done again
        wait_until(lambda: len(read_runs(runs_file).items) >= n * 0.7, 60, "some progress")
        victim.kill()
        kills, _ = kill_until_ended(app, pool, batch_id, runs_file, n, max_kills=3)
        runs = called_back(app, runs_file, timeout_s=60)
        assert pool.proc.poll() is None, pool.log()  # the pool never restarted
        assert pool.stop() == 0, pool.log()
        runs = read_runs(runs_file)
        assert set(runs.items) == set(range(n)), "an item never ran"
        expected = {"total": n, "done": n - failing, "dead": failing, "cancelled": 0}
        check_called_back_once(app, runs, batch_id, {**expected, "failed": failing}, [queue])
        print(f"{kills} children killed; {sum(runs.items.values()) - n} re-runs")
    finally:
        if pool is not None:
            pool.kill()
        app.close()
        victim.start()  # back as a replica of its successor, for the tests that follow
        cluster.wait_ok()


PRODUCERS, PER_PRODUCER, CHUNK = 8, 500, 50


def test_a_batch_enqueued_from_eight_processes_calls_back_once_after_all(
    redis_server: RedisServer, app: fastq.App, namespace: str, tmp_path: Path
) -> None:
    """Eight processes join one open batch at once, on two queues; one queue is
    paused, so that when the batch is closed half of it is still to run, while
    the other's share has long ended."""
    runs_file = tmp_path / "runs.txt"
    total, half = PRODUCERS * PER_PRODUCER, PRODUCERS * PER_PRODUCER // 2
    with app.batch(on_complete=batch_jobs.report, close=False) as batch:
        pass  # opened, with its callback: the producers join it
    pool = start_pool(redis_server.url, namespace, tmp_path, ["b", "b2"], "-c", "2")
    try:
        pool.wait_children(2)
        app.pause("b2")  # known now: the pool said which queues its app has jobs on
        env = subprocess_env(redis_server.url, BATCH_JOBS_RUNS_FILE=str(runs_file))
        producers = []
        for k in range(PRODUCERS):  # odd ones on b, even ones on b2
            args = [namespace, batch.id, str(k * PER_PRODUCER), str(PER_PRODUCER)]
            cmd = [sys.executable, "-m", APP, *args, "b" if k % 2 else "b2", str(CHUNK)]
            producers.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
        assert [p.wait(timeout=60) for p in producers] == [0] * PRODUCERS
        wait_until(lambda: app.stats("b")["processed"] == half, 30, "queue b's items")
        # open: its share of b ended long ago, and it has neither ended nor called back
        status = app.batch_status(batch.id)
        assert status is not None
        assert (status.state, status.total, status.done) == ("open", total, half), status
        assert status.queues == ["b", "b2"]
        app.close_batch(batch.id)
        status = app.batch_status(batch.id)
        assert status is not None and (status.state, status.pending) == ("closed", half), status
        assert read_runs(runs_file).starts == []
        app.resume("b2")
        runs = called_back(app, runs_file)
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    runs = read_runs(runs_file)
    assert runs.items == {i: 1 for i in range(total)}
    expected = {"total": total, "done": total, "dead": 0, "cancelled": 0, "failed": 0}
    check_called_back_once(app, runs, batch.id, expected, ["b", "b2"])


def test_a_batch_cancelled_mid_drain_runs_nothing_more_and_calls_back_with_the_count(
    redis_server: RedisServer, app: fastq.App, namespace: str, tmp_path: Path
) -> None:
    runs_file = tmp_path / "runs.txt"
    n, children, claim = 3000, 2, 10
    with app.batch(on_complete=batch_jobs.report, on_success=batch_jobs.notify) as batch:
        app.enqueue_many("item", [(i, False, 0.002) for i in range(n)], queue="b")
    pool = start_pool(
        redis_server.url, namespace, tmp_path, ["b"], "-c", str(children), "--batch", str(claim)
    )
    try:
        wait_until(lambda: len(read_runs(runs_file).items) >= n // 5, 60, "a fifth of the items")
        cancelled = app.cancel_batch(batch.id)
        ran_before = sum(read_runs(runs_file).items.values())
        runs = called_back(app, runs_file)
        # the pool pops every cancelled id left in the ready list, and runs none
        wait_until(lambda: app.stats("b")["ready"] == 0, 30, "the ready list to empty")
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    runs = read_runs(runs_file)
    ran_after = sum(runs.items.values()) - ran_before
    print(f"{cancelled} cancelled, {ran_before} ran before, {ran_after} after")
    # those the pool held when the cancel came, at most: each child a claim running
    # and one fetched ahead
    assert ran_after <= children * 2 * claim
    assert set(runs.items.values()) == {1}
    done = len(runs.items)
    assert cancelled == n - done > 0
    expected = {"total": n, "done": done, "dead": 0, "cancelled": n - done, "failed": 0}
    seen = check_called_back_once(app, runs, batch.id, expected, ["b"], drained=False)
    assert seen["status"]["cancelled_at"] is not None
    status = app.batch_status(batch.id)
    assert status is not None and status.state == "ended" and status.cancelled_at is not None
    stats = app.stats("b")
    assert (stats["processed"], stats["cancelled"], stats["inflight"]) == (done, n - done, 0)
