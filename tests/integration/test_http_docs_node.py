"""docs/http.md's Node producer and worker, taken from the page itself (so that the
page cannot drift from what runs) and run as written by Node 20 against a real
``fastq serve`` with no app: a queue only HTTP clients use is declared (PUT), fed
and drained with no restart of anything; and the jobs of a Node worker killed while
it held them come back once their lease lapses (a reaper running), each is done
once, and the dead worker's late ``done`` is a 409.

``node`` is required (``ci/setup.sh`` installs it): these tests fail without it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.integration.test_http_workers_node import WORKER_JS, node
from tests.support.pool import wait_until
from tests.support.processes import ROOT, fastq_cmd, subprocess_env
from tests.support.serve import Server, Servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DOC = ROOT / "docs" / "http.md"
SECTION = "### A producer and a worker in Node"
Q = "images"


def doc_scripts() -> dict[str, str]:
    """The section's code blocks, by the file name each names on its first line."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n### ", len(SECTION))]
    blocks = re.findall(r"```js\n(.*?)```", section, re.S)
    named = {block.split("\n", 1)[0].removeprefix("// ").strip(): block for block in blocks}
    assert set(named) == {"producer.mjs", "worker.mjs"}, named.keys()
    return named


@pytest.fixture
def served(redis_server: RedisServer, namespace: str, tmp_path: Path) -> Iterator[Server]:
    """``fastq serve`` with no --app: Redis alone, as a server for other languages."""
    servers = Servers(redis_server.url, namespace, tmp_path)
    yield servers.start()
    servers.stop_all()


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, code in doc_scripts().items():
        out[name] = tmp_path / name
        out[name].write_text(code)
    return out


def node_env(served: Server) -> dict[str, str]:
    assert served.token is not None
    return {**os.environ, "FASTQ_URL": served.base_url, "FASTQ_TOKEN": served.token}


def start_worker(script: Path, served: Server) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [node(), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=node_env(served),
    )


def stop(proc: subprocess.Popen[str]) -> str:
    """Stop a worker that runs forever; what it wrote to stderr (nothing: no error)."""
    assert proc.poll() is None, proc.communicate()[1]
    proc.kill()
    return proc.communicate(timeout=30)[1]


def test_the_docs_node_producer_and_worker_declare_feed_and_drain_a_queue(
    app: fastq.App, r: redis.Redis, served: Server, scripts: dict[str, Path]
) -> None:
    assert not r.sismember(f"{app.namespace}:queues", Q)  # nobody declared it
    produced = subprocess.run(
        [node(), str(scripts["producer.mjs"])],
        capture_output=True,
        text=True,
        timeout=60,
        env=node_env(served),
    )
    assert produced.returncode == 0, produced.stderr
    ids = json.loads(produced.stdout)
    assert len(ids) == 10
    assert app.rate_limit(Q) is not None and app.rate_limit(Q).rate == 500  # type: ignore[union-attr]
    worker = start_worker(scripts["worker.mjs"], served)
    try:
        wait_until(lambda: app.stats(Q)["processed"] == 10, 60, "the worker to drain")
    finally:
        assert stop(worker) == ""
    assert [app.result(job_id, timeout_s=5) for job_id in ids] == [2 * i for i in range(10)]
    info = app.get_job(ids[0])
    assert info is not None and (info.state, info.attempts) == ("done", 1)
    # run again, the producer declares the same queue again: idempotent
    again = subprocess.run(
        [node(), str(scripts["producer.mjs"])],
        capture_output=True,
        text=True,
        timeout=60,
        env=node_env(served),
    )
    assert again.returncode == 0, again.stderr


def test_a_killed_node_workers_jobs_come_back_and_are_done_once(
    redis_server: RedisServer,
    app: fastq.App,
    r: redis.Redis,
    served: Server,
    scripts: dict[str, Path],
) -> None:
    app.declare_queue(Q)
    ids = app.enqueue_many("add", [[i, 1] for i in range(6)], queue=Q)
    holder = subprocess.Popen(
        [node(), str(WORKER_JS), served.base_url, Q, "hold", "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=node_env(served),
    )
    assert holder.stdout is not None
    held = json.loads(holder.stdout.readline())
    assert sorted(job["id"] for job in held) == sorted(ids)
    holder.send_signal(signal.SIGKILL)  # dies holding all six
    holder.communicate(timeout=30)
    keys = app.keys(Q)
    assert r.llen(keys.ready) == 0
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
        # their 1 s lease lapses: the reaper hands them back, a stall counted on each
        wait_until(lambda: r.llen(keys.ready) == 6, 30, "the jobs back")
        worker = start_worker(scripts["worker.mjs"], served)
        try:
            wait_until(lambda: app.stats(Q)["processed"] == 6, 60, "the jobs done again")
        finally:
            assert stop(worker) == ""
    finally:
        reaper.send_signal(signal.SIGTERM)
        _, reaper_log = reaper.communicate(timeout=30)
    assert reaper.returncode == 0, reaper_log
    assert [app.result(job_id, timeout_s=5) for job_id in ids] == [i + 1 for i in range(6)]
    assert all(r.hget(keys.stalls, job_id) is None for job_id in ids)  # done: forgotten
    # the dead worker's done, sent late with its tokens: refused, never applied
    assert served.token is not None
    headers = {"Authorization": f"Bearer {served.token}"}
    with httpx.Client(base_url=served.base_url, headers=headers, timeout=30) as http:
        for job in held:
            late = http.post(f"/api/v1/jobs/{job['id']}/done", json={"token": job["token"]})
            assert late.status_code == 409 and "lease lapsed" in late.json()["error"]
    stats = app.stats(Q)
    assert (stats["processed"], stats["stale_acks"]) == (6, 6)
