"""The CLI on a sharded queue, as users run it: one queue in every listing (not one
line per shard), and the commands without ``--app`` find its shards in Redis."""

from __future__ import annotations

import orjson
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import fastq_cmd, run_cli, wait_while_working

APP = "tests.apps.sharded_jobs"


def test_queues_stats_pause_inspect_wait_and_a_worker_on_a_sharded_queue(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    app.declare_queue("mailer", shards=4)
    ids = app.enqueue_many("send", [(i,) for i in range(3000)], queue="mailer")
    ns = ("--namespace", app.namespace)
    proc = run_cli(redis_server.url, "queues", *ns)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "mailer ready=3000 inflight=0 scheduled=0 dead=0 broken=0 workers=0 shards=4"
    ]
    rows = orjson.loads(run_cli(redis_server.url, "stats", *ns, "--json").stdout)
    assert list(rows) == ["mailer"] and rows["mailer"]["shards"] == 4
    assert rows["mailer"]["ready"] == 3000
    assert run_cli(redis_server.url, "pause", "-q", "mailer", *ns).returncode == 0
    assert app.stats("mailer")["paused"] == 1
    assert run_cli(redis_server.url, "resume", "-q", "mailer", *ns).returncode == 0
    proc = run_cli(redis_server.url, "inspect", ids[-1], *ns, "--json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["queue"] == "mailer"
    proc = run_cli(redis_server.url, "limit", "mailer", "10/s", *ns)
    assert (
        proc.returncode == 0
        and proc.stdout == "mailer: at most 10/s (burst 1), across every worker\n"
    )
    row = orjson.loads(run_cli(redis_server.url, "stats", *ns, "--json").stdout)["mailer"]
    assert row["limit"] == "10/s(burst1)"  # the whole queue's
    assert run_cli(redis_server.url, "limit", "mailer", "off", *ns).returncode == 0
    proc = run_cli(redis_server.url, "wait", "-q", "mailer", *ns, "--timeout", "0.3s")
    assert proc.returncode == 1 and "mailer: 0/3000 done" in proc.stdout  # the sum
    worker = fastq_cmd("worker", "--app", APP, *ns, "--burst", "--batch", "10")
    proc = wait_while_working(redis_server.url, ["-q", "mailer", *ns, "--interval", "0.05"], worker)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "mailer drained: 3000 done, 0 failed, 0 dead"
    assert app.stats("mailer")["processed"] == 3000
    ran = r.hgetall(f"{app.namespace}:runs")
    assert len(ran) == 3000 and set(ran.values()) == {b"1"}
