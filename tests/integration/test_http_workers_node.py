"""Node, with no fastq code: a Node HTTP worker (``http_worker.js``, Node's own
``fetch``) runs, through a ``fastq serve`` process, the jobs Python enqueued on a
queue no Python worker serves, and a job it stops heartbeating comes back through a
real ``fastq reaper`` and runs once more, its late ``done`` refused; jobs a Node
producer enqueued run in a ``fastq pool``; a Node producer over HTTP and a worker in
``curl`` alone, as docs/http.md shows them.

``node`` is required (``ci/setup.sh`` installs it): these tests fail without it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.integration.test_foreign_producers import NODE_PRODUCER
from tests.support.pool import wait_until
from tests.support.processes import ROOT, fastq_cmd, subprocess_env
from tests.support.serve import Server, Servers

WORKER_JS = Path(__file__).with_name("http_worker.js")
Q = "nodeq"


def node() -> str:
    path = shutil.which("node")
    assert path is not None, "node is not installed: ci/setup.sh installs it (nodejs)"
    return path


@pytest.fixture
def served(
    redis_server: RedisServer, app: fastq.App, namespace: str, tmp_path: Path
) -> Iterator[Server]:
    """``fastq serve`` with no --app: Redis alone, as a server for other languages."""
    app.declare_queue(Q)
    servers = Servers(redis_server.url, namespace, tmp_path)
    yield servers.start()
    servers.stop_all()


def node_worker(served: Server, *args: str) -> subprocess.Popen[str]:
    assert served.token is not None
    return subprocess.Popen(
        [node(), str(WORKER_JS), served.base_url, Q, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FASTQ_TOKEN": served.token},
    )


def finish(proc: subprocess.Popen[str], stdin: str = "") -> list[object]:
    out, err = proc.communicate(stdin, timeout=90)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_a_node_worker_runs_the_jobs_python_enqueued(
    app: fastq.App, r: redis.Redis, served: Server
) -> None:
    ids = app.enqueue_many("add", [[i, i] for i in range(20)], queue=Q)
    app.enqueue("explode", [], queue=Q, job_id="boom")
    (out,) = finish(node_worker(served, "work", "21"))
    assert isinstance(out, dict)
    assert sorted(out["done"]) == sorted(ids) and out["failed"] == ["boom"]
    assert set(out["statuses"]) == {200}
    assert [app.result(job_id, timeout_s=5) for job_id in ids] == [2 * i for i in range(20)]
    stats = app.stats(Q)
    assert (stats["processed"], stats["dead"], stats.get("stale_acks", 0)) == (20, 1, 0)
    (dead,) = app.dead_jobs(Q)
    assert dead.id == "boom" and dead.last_error == "Error: exploded on purpose"
    info = app.get_job(ids[0])
    assert info is not None and info.state == "done" and info.worker.startswith("http:node-w:")  # type: ignore[union-attr]
    keys = app.keys(Q)
    assert r.zcard(keys.leases) == 0 and r.hlen(keys.progress) == 0  # nothing left behind


def test_a_job_its_node_worker_stops_heartbeating_comes_back_and_runs_once_more(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, served: Server
) -> None:
    app.enqueue("add", [20, 22], queue=Q, job_id="slow")
    keys = app.keys(Q)
    abandoned = node_worker(served, "abandon")
    assert abandoned.stdout is not None
    assert json.loads(abandoned.stdout.readline()) == {"claimed": "slow", "attempt": 1}
    reaper = subprocess.Popen(
        fastq_cmd(
            "reaper",
            "--app",
            "tests.apps.no_jobs",
            "--namespace",
            app.namespace,
            "-q",
            Q,
            "--interval",
            "0.2",
        ),
        env=subprocess_env(redis_server.url),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # its 1 s lease lapses, unextended: the reaper hands the job back, a stall counted
        wait_until(lambda: r.lrange(keys.ready, 0, -1) == [b"slow"], 30, "the job back")
    finally:
        reaper.send_signal(signal.SIGTERM)
        _, reaper_log = reaper.communicate(timeout=30)
    assert reaper.returncode == 0, reaper_log
    assert "the lease of worker http:node-a:" in reaper_log and "1 jobs taken back" in reaper_log
    assert r.hget(keys.stalls, "slow") == b"1"
    (again,) = finish(node_worker(served, "work", "1"))  # it runs once more
    assert again == {"done": ["slow"], "failed": [], "statuses": [200, 200]}
    (late,) = finish(abandoned, "go\n")  # the first worker's late done
    assert isinstance(late, dict) and late["status"] == 409
    assert "lease lapsed" in late["body"]["error"]
    assert app.result("slow", timeout_s=5) == 42  # the second run's, not the late one's
    stats = app.stats(Q)
    assert (stats["processed"], stats["stale_acks"]) == (1, 1)


def test_jobs_a_node_producer_enqueued_run_in_a_pool(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, tmp_path: Path
) -> None:
    # test_foreign_producers runs the same producer's jobs with one `fastq worker`;
    # here a pool of two children runs them
    (tmp_path / "producer.js").write_text(NODE_PRODUCER)
    (tmp_path / "enqueue.lua").write_bytes(
        subprocess.run(fastq_cmd("lua", "enqueue"), capture_output=True, check=True).stdout
    )
    proc = subprocess.run(
        [
            node(),
            str(tmp_path / "producer.js"),
            str(redis_server.port),
            app.namespace,
            "count",
            str(tmp_path / "enqueue.lua"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    queued = app.stats("count")["ready"]  # what the producer put in (1,501 jobs as it stands)
    assert queued > 1000
    pool = subprocess.Popen(
        fastq_cmd(
            "pool",
            "-c",
            "2",
            "--app",
            "tests.apps.counting",
            "--namespace",
            app.namespace,
            "-q",
            "count",
        ),
        env=subprocess_env(redis_server.url),
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = f"{app.namespace}:runs"
    try:
        wait_until(
            lambda: r.hlen(runs) == queued and app.stats("count")["processed"] == queued,
            60,
            "the pool to run every job",
        )
    finally:
        pool.send_signal(signal.SIGTERM)
        _, log = pool.communicate(timeout=60)
    assert pool.returncode == 0, log
    assert set(r.hgetall(runs).values()) == {b"1"}  # each once


def test_a_node_producer_over_http_and_its_jobs_read_back(app: fastq.App, served: Server) -> None:
    (produced,) = finish(node_worker(served, "produce", "30"))
    assert isinstance(produced, dict) and produced["statuses"] == [200, 200]
    ids = produced["ids"]
    assert len(set(ids)) == 31 and ids[-1] == "node-42"
    (out,) = finish(node_worker(served, "work", "31"))  # run by Node over HTTP too
    assert isinstance(out, dict) and sorted(out["done"]) == sorted(ids)
    (read,) = finish(node_worker(served, "read", "node-42"))
    assert isinstance(read, dict) and read["status"] == 200
    assert (read["body"]["state"], read["body"]["result"]) == ("done", 42)
    assert app.stats(Q)["processed"] == 31


CURL_FLOW = r"""
set -euo pipefail
AUTH="Authorization: Bearer $FASTQ_TOKEN"
API="$BASE/api/v1"
post() { curl -sS --fail-with-body -H "$AUTH" --json "$2" "$API/$1"; echo; }
# a producer (docs/http.md, "Enqueue")
post "queues/$Q/jobs" '{"name": "add", "args": [2, 3], "id": "curl-1"}'
# a worker: claim, heartbeat, done (docs/http.md, "Workers in any language")
claim=$(post "queues/$Q/claim" '{"max": 1, "lease_s": 30}')
token=$(printf '%s' "$claim" | python3 -c 'import json, sys; print(json.load(sys.stdin)["jobs"][0]["token"])')
post "jobs/curl-1/heartbeat" "$(printf '{"token": "%s", "progress": 0.5}' "$token")"
post "jobs/curl-1/done" "$(printf '{"token": "%s", "result": 5}' "$token")"
curl -sS --fail-with-body -H "$AUTH" "$API/jobs/curl-1"
"""  # noqa: E501


def test_a_producer_and_a_worker_in_curl_alone(app: fastq.App, served: Server) -> None:
    assert served.token is not None and shutil.which("curl") is not None
    proc = subprocess.run(
        ["bash", "-c", CURL_FLOW],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FASTQ_TOKEN": served.token, "BASE": served.base_url, "Q": Q},
    )
    assert proc.returncode == 0, proc.stderr
    enqueued, beat, done, read = (json.loads(line) for line in proc.stdout.splitlines())
    assert enqueued == {"ids": ["curl-1"]}
    # its one run counted, as a pool's is
    assert read["state"] == "done" and read["result"] == 5 and read["attempts"] == 1
    assert app.stats(Q)["processed"] == 1
