"""``fastq inspect JOB_ID``: one job as ``app.get_job`` sees it, for a person or as JSON."""

from __future__ import annotations

import time

import orjson
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import run_cli
from tests.support.workers import drain


def inspect_cli(url: str, namespace: str, *args: str) -> tuple[int, str, str]:
    base = ("--app", "tests.apps.counting", "--namespace", namespace)
    proc = run_cli(url, "inspect", *args, *base, timeout=30)
    return proc.returncode, proc.stdout, proc.stderr


def test_inspect_a_dead_job_for_a_person_and_as_json(
    redis_server: RedisServer, app: fastq.App
) -> None:
    @app.job(queue="count", retries=0)
    def explode(n: int, why: str = "") -> None:
        raise ValueError(f"boom {n}")

    job_id = explode.enqueue(7, why="test")
    drain(app, ["count"])
    code, out, err = inspect_cli(redis_server.url, app.namespace, job_id)  # every queue searched
    assert code == 0, err
    fields, _, tb = out.partition("traceback:\n")
    lines = dict(line.split(None, 1) for line in fields.splitlines())
    assert lines["id"] == job_id and lines["queue"] == "count" and lines["state"] == "dead"
    assert (lines["name"], lines["args"], lines["kwargs"]) == ("explode", "[7]", '{"why":"test"}')
    assert (lines["attempts"], lines["stalls"]) == ("1", "0")
    assert lines["worker"] != "-" and lines["ended_at"].endswith("+00:00")  # its record
    assert lines["last_error"] == "ValueError: boom 7"
    assert lines["enqueued_at"].endswith("+00:00") and lines["failed_at"].endswith("+00:00")
    assert tb.startswith("  Traceback (most recent call last):") and "raise ValueError" in tb
    code, out, err = inspect_cli(redis_server.url, app.namespace, job_id, "-q", "count", "--json")
    assert code == 0, err
    info = orjson.loads(out)
    assert (info["state"], info["args"], info["kwargs"]) == ("dead", [7], {"why": "test"})
    assert info["last_error"] == "ValueError: boom 7" and "raise ValueError" in info["traceback"]
    assert isinstance(info["enqueued_at"], float) and "raw" not in info


def test_inspect_shows_progress_and_a_broken_id_without_payload(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    job_id = app.enqueue("count", args=[3], queue="count")
    k = app.keys("count")
    r.hset(k.progress, job_id, orjson.dumps({"fraction": 0.42, "meta": {"step": "copy"}}))
    code, out, err = inspect_cli(redis_server.url, app.namespace, job_id, "-q", "count")
    assert code == 0, err
    lines = [line.split(None, 1) for line in out.splitlines()]
    assert ["state", "queued"] in lines and ["progress", '42% {"step":"copy"}'] in lines
    r.hset(k.broken, "ghost", "no payload")  # as a claim records an id it found no payload for
    code, out, err = inspect_cli(redis_server.url, app.namespace, "ghost", "--json")
    assert code == 0, err
    info = orjson.loads(out)
    assert (info["state"], info["broken_reason"], info["name"]) == ("broken", "no payload", None)


def test_inspect_an_unknown_id_says_so_and_exits_1(
    redis_server: RedisServer, app: fastq.App
) -> None:
    app.enqueue("count", args=[1], queue="count")
    code, out, err = inspect_cli(redis_server.url, app.namespace, "nope", "-q", "count")
    assert (code, out) == (1, "")
    assert err.strip().splitlines() == [
        "fastq: error: no job 'nope' in queue count: never enqueued, or it ended before "
        "what its queue keeps of ended jobs (7 days, 100,000 records by default)"
    ]
    code, _, err = inspect_cli(redis_server.url, app.namespace, "nope", "-q", "a:b")
    assert code == 2 and "queue name" in err


def test_inspect_a_done_job_shows_its_runs_and_run_time(
    redis_server: RedisServer, app: fastq.App
) -> None:
    runs: list[int] = []

    @app.job(queue="count", retries=2, backoff_s=0)
    def flaky(n: int) -> None:
        runs.append(n)
        if len(runs) == 1:
            raise ValueError("first time")
        time.sleep(0.03)

    job_id = flaky.enqueue(1)
    drain(app, ["count"])
    assert runs == [1, 1]
    code, out, err = inspect_cli(redis_server.url, app.namespace, job_id, "-q", "count", "--json")
    assert code == 0, err
    info = orjson.loads(out)
    # from its record: the second run succeeded, and took about 30 ms
    assert (info["state"], info["attempts"]) == ("done", 2)
    assert 30 <= info["run_ms"] < 5000 and info["worker"]
    listed = app.recent_jobs("count", "done")
    assert [(j.id, j.attempts, j.run_ms) for j in listed] == [(job_id, 2, info["run_ms"])]
