"""The worker registry: a pool lists itself and each child, idle or busy and with
what, in `fastq workers`, `fastq stats` and `app.workers()`; it is gone once the
pool stops; a lapsed entry is dropped by its reader; `fastq wait` says when no
worker serves the queue."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import redis

import fastq
from fastq.protocol.workers import live_entries, registry_key
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, wait_until
from tests.support.processes import fastq_cmd, subprocess_env


def _pool_entry(app: fastq.App) -> dict[str, Any]:
    [entry] = app.workers()
    return entry


def test_a_pool_lists_its_children_idle_and_busy_and_leaves_when_stopped(
    redis_server: RedisServer, app: fastq.App, tmp_path: Path
) -> None:
    pool = Pool(redis_server.url, app.namespace, tmp_path / "pool.log", "-c", "2")
    try:
        pids = {p.pid for p in pool.wait_children(2)}
        reaper = pool.wait_children(1, kind="reaper")[0].pid

        def listed() -> bool:
            entries = app.workers()
            return bool(entries) and {c["pid"] for c in entries[0]["children"]} == pids | {reaper}

        wait_until(listed, 20, "the pool's children in the registry")
        entry = _pool_entry(app)
        assert (entry["kind"], entry["pid"], entry["queues"]) == ("pool", pool.proc.pid, ["q"])
        assert entry["redis"] == redis_server.url and entry["children_wanted"] == 2
        workers = [c for c in entry["children"] if c["kind"] == "worker"]
        assert {c["state"] for c in workers} <= {"idle", "waiting"}
        assert all(c["rss"] > 1 << 20 for c in entry["children"])
        # a job that runs 8 s (the CLI below starts in seconds on a loaded machine): one
        # child busy with it, since when it started
        before = time.time()
        job_id = app.enqueue("work", [1], {"sleep_s": 8.0}, queue="q")

        def busy() -> list[dict[str, Any]]:
            return [c for c in _pool_entry(app)["children"] if c.get("state") == "busy"]

        wait_until(lambda: len(busy()) == 1, 20, "a busy child")
        [child] = busy()
        assert child["pid"] in pids
        assert child["job"]["id"] == job_id and child["job"]["queue"] == "q"
        assert before - 1 <= child["job"]["since"] <= time.time()
        proc = subprocess.run(
            fastq_cmd("workers", "--namespace", app.namespace),
            env=subprocess_env(redis_server.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith(f"pool {entry['id']} on q: 2/2 workers, since ")
        assert any(
            line.startswith(f"  worker {child['pid']} busy ") and f" on q {job_id} " in line
            for line in lines
        ), lines
        assert f"  reaper {reaper} rss=" in proc.stdout
        proc = subprocess.run(
            fastq_cmd("stats", "-q", "q", "--namespace", app.namespace),
            env=subprocess_env(redis_server.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert " workers=2 " in proc.stdout, proc.stdout
        wait_until(lambda: not busy(), 20, "the job's end")
        done = sum(c.get("jobs_done", 0) for c in _pool_entry(app)["children"])
        assert done == 1
        # the ack counted it in the queue's history too (the dashboard's charts)
        assert sum(p for _, p, _ in app.history("q", window_s=60)) == 1
    finally:
        assert pool.stop() == 0
    assert app.workers() == []  # withdrawn as it stopped, not left to lapse


def test_a_lapsed_entry_is_dropped_by_its_reader(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    key = registry_key(app.namespace)
    (seconds, micros) = r.time()
    now_ms = seconds * 1000 + micros // 1000
    r.hset(key, "gone", orjson.dumps({"id": "gone", "expires_at": now_ms - 1, "queues": ["q"]}))
    r.hset(key, "live", orjson.dumps({"id": "live", "expires_at": now_ms + 60_000}))
    r.hset(key, "junk", b"not json")
    assert [e["id"] for e in live_entries(r, app.namespace)] == ["live"]
    assert r.hkeys(key) == [b"live"]


def test_wait_says_when_no_worker_serves_the_queue(
    redis_server: RedisServer, app: fastq.App
) -> None:
    app.declare_queue("q")
    app.enqueue("work", [1], queue="q")
    proc = subprocess.run(
        fastq_cmd(
            "wait",
            "-q",
            "q",
            "--namespace",
            app.namespace,
            "--timeout",
            "0.5s",
            "--interval",
            "0.1",
        ),
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "fastq: no worker serves q now (`fastq workers` lists the live ones); still waiting",
        "fastq: q not drained within 0.5s (--timeout)",
    ]
