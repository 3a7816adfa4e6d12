"""The markers by which a process notices that Redis lost its data
(:mod:`fastq.monitor.losses`), on a real Redis and a real Redis Cluster: a fresh
namespace is no loss, a marker gone is one ERROR per watcher naming what it held
that no longer exists, and on a cluster only the queues of the node that lost them."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
import redis

import fastq
from fastq.connection.cluster import node_of
from fastq.monitor.losses import CHECK_S, LossWatch
from fastq.protocol.markers import marker_key
from fastq.worker.worker import Worker
from tests.support.pool import wait_until

LOG = logging.getLogger("test.markers")


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


def test_a_fresh_namespace_is_no_loss_and_a_lost_marker_one_error_per_watcher(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ns = app.namespace
    job_id = app.enqueue("anything", [], queue="q")  # it exists after the loss: not named
    held = {"q": [job_id.encode(), b"gone-1", b"gone-2"], "other": [b"elsewhere"]}
    first = LossWatch(ns, "worker w1", LOG, held=lambda: held)
    second = LossWatch(ns, "reaper", LOG)
    assert first.check(r, ["q", "r"]) == []  # fresh: the markers are written
    assert second.check(r, ["q", "r", "q"]) == []
    assert first.check(r, ["q", "r"]) == second.check(r, []) == []
    assert r.exists(marker_key(ns, "q"), marker_key(ns, "r")) == 2
    assert errors(caplog) == []

    r.delete(marker_key(ns, "q"), marker_key(ns, "r"))
    assert first.check(r, ["q", "r"]) == ["q", "r"]
    (line,) = errors(caplog)
    assert line.startswith("worker w1: Redis lost its data (the markers ") and "are gone" in line
    assert line.endswith("2 jobs this worker held no longer exist: ids gone-1, gone-2"), line
    # written anew: the other watcher sees another token, and says so once too
    assert second.check(r, []) == ["q", "r"]
    assert len(errors(caplog)) == 2 and "were written anew" in errors(caplog)[1]
    assert "the jobs, schedules, dead and broken sets of queues q, r are gone" in errors(caplog)[1]
    # once each
    for _ in range(3):
        assert first.check(r, ["q", "r"]) == second.check(r, []) == []
    assert len(errors(caplog)) == 2


def test_a_new_queue_later_is_no_loss_and_a_redis_error_says_nothing(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    watch = LossWatch(app.namespace, "reaper", LOG)
    watch.check(r, ["q"])
    assert watch.check(r, ["q", "new"]) == []

    def refused() -> redis.Redis:
        raise redis.ConnectionError("Redis is away")

    watch.check_now(refused, lambda _: ["q"])  # never raises
    # one marker of each Redis is looked at a time, in turn: a marker deleted alone
    # is found within as many looks as there are queues
    r.delete(marker_key(app.namespace, "new"))
    for _ in range(2):
        watch.check_now(lambda: r, lambda _: [])
    assert watch.losses == 1 and len(errors(caplog)) == 1
    assert "queues new are gone" in errors(caplog)[0]


def test_on_a_cluster_only_the_queues_of_the_node_that_lost_its_data(
    capp: fastq.App, caplog: pytest.LogCaptureFixture
) -> None:
    client = capp.redis
    ns = capp.namespace
    queues = [f"q{i}" for i in range(12)]
    nodes = {q: node_of(client, marker_key(ns, q)).name for q in queues}  # type: ignore[arg-type]
    assert len(set(nodes.values())) > 1
    watch = LossWatch(ns, "worker w1", LOG, held=lambda: {q: [f"{q}-job".encode()] for q in queues})
    assert watch.check(client, queues) == []
    # one node loses its data (here: only this test's keys on it)
    lost_node = nodes["q0"]
    on_it = [q for q in queues if nodes[q] == lost_node]
    client.delete(*[marker_key(ns, q) for q in on_it])
    assert sorted(watch.check(client, queues)) == sorted(on_it)
    (line,) = errors(caplog)
    jobs = "1 job" if len(on_it) == 1 else f"{len(on_it)} jobs"
    assert f"{jobs} this worker held no longer exist: ids {on_it[0]}-job" in line, line
    assert watch.check(client, queues) == []
    assert len(errors(caplog)) == 1


def test_a_worker_names_the_jobs_it_held_once_and_runs_what_comes_next(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.job(queue="q")
    def slow(i: int) -> None:
        ran.append(i)
        time.sleep(0.3)

    before = set(app.enqueue_many("slow", [(i,) for i in range(30)], queue="q"))
    worker = Worker(app, ["q"], batch_size=5, handle_signals=False, idle_timeout_s=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: app.stats("q")["inflight"] > 0, 30, "the worker holding jobs")
        # this namespace's data is lost (the session's Redis is shared: no FLUSHDB)
        r.delete(*r.keys(f"{app.namespace}:*"))
        wait_until(lambda: errors(caplog), 30, "the worker to notice")
        after = app.enqueue_many("slow", [(100 + i,) for i in range(5)], queue="q")
        wait_until(lambda: {100 + i for i in range(5)} <= set(ran), 30, "the jobs enqueued after")
        time.sleep(2 * CHECK_S)  # two more looks at the markers: nothing more is said
    finally:
        worker.stop()
        thread.join(30)
    (line,) = errors(caplog)
    held = re.search(r"(\d+) jobs? this worker held no longer exist: ids (.*)$", line)
    assert held is not None, line
    named = set(held.group(2).split(", "))
    # the jobs it held: some of the first ones (a batch or two), none enqueued after
    assert named and named <= before and not named & set(after), line
    assert int(held.group(1)) == len(named) <= 10
