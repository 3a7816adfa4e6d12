"""Reading a job back: ``fastq inspect --json`` and ``app.get_job`` agree, both read
through ``job_info.lua``; and a client of another language reads the same with the
script ``fastq lua job_info`` prints and plain Redis commands (docs/protocol.md,
"Reading a job back")."""

from __future__ import annotations

import dataclasses
import json
import zlib
from typing import Any, Optional

import orjson
import pytest
import redis

import fastq
from fastq.protocol.contracts import CLAIM, JOB_INFO
from fastq.testing.redis_server import RedisServer
from tests.support.processes import run_cli
from tests.support.workers import drain

SUFFIXES = (
    "jobs",
    "scheduled",
    "dead",
    "broken",
    "stalls",
    "poison",
    "progress",
    "cancelled",
    "links",
    "records",
    "records_old",
    "leases",
)


@pytest.fixture
def jobs(app: fastq.App) -> dict[str, fastq.JobDef[Any]]:
    @app.job(queue="q", result_ttl_s=600)
    def add(a: int, b: int = 0) -> int:
        return a + b

    @app.job(queue="q", retries=0)
    def explode(why: str) -> None:
        raise ValueError(f"boom: {why}")

    @app.job(queue="q")
    def hold(n: int) -> None: ...

    return {"add": add, "explode": explode, "hold": hold}


def states(app: fastq.App, r: redis.Redis, jobs: dict[str, fastq.JobDef[Any]]) -> dict[str, str]:
    """One job in each state a queue shows; returns state -> id."""
    out = {
        "done": jobs["add"].enqueue_with(job_id="sum-1")(2, b=3),
        "dead": jobs["explode"].enqueue("disk full"),
    }
    drain(app, ["q"])
    out["active"] = jobs["hold"].enqueue_with(tags=["batch-7"])(1)
    k = app.keys("q")
    claimed = CLAIM.call(r, CLAIM.keys_for(k, "host:1:w"), CLAIM.argv("host:1:w", 10, 60_000, 100))
    assert claimed.ids == [out["active"].encode()]
    r.hset(k.progress, out["active"], orjson.dumps({"fraction": 0.25, "meta": {"step": 1}}))
    out["queued"] = jobs["hold"].enqueue_with(tags=["batch-7"])(2)
    out["scheduled"] = jobs["hold"].enqueue_in(300, 3)
    out["cancelled"] = jobs["hold"].enqueue(4)
    assert app.cancel(out["cancelled"]).stopped == 1
    return out


def inspect_json(url: str, namespace: str, job_id: str) -> Any:
    proc = run_cli(url, "inspect", job_id, "--namespace", namespace, "--json", timeout=30)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def test_inspect_json_and_get_job_agree_in_every_state(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, jobs: dict[str, fastq.JobDef[Any]]
) -> None:
    ids = states(app, r, jobs)
    for state, job_id in ids.items():
        info = app.get_job(job_id)
        assert info is not None and info.state == state, (state, info)
        shown = inspect_json(redis_server.url, app.namespace, job_id)
        expected = dataclasses.asdict(info)
        del expected["raw"]
        assert shown == expected, state
    done = app.get_job(ids["done"])
    assert done is not None and (done.result, done.has_result) == (5, True)
    assert done.worker is not None and done.ended_at is not None  # its record
    # for a person: the kept result on its own line, and no line for a job without one
    for job_id, line in ((ids["done"], ["result", "5"]), (ids["queued"], None)):
        proc = run_cli(redis_server.url, "inspect", job_id, "--namespace", app.namespace)
        assert proc.returncode == 0, proc.stderr
        lines = [row.split(None, 1) for row in proc.stdout.splitlines()]
        assert [row for row in lines if row[0] in ("result", "has_result")] == (
            [line] if line else []
        )
    dead = app.get_job(ids["dead"])
    assert dead is not None and dead.last_error == "ValueError: boom: disk full"
    active = app.get_job(ids["active"])
    assert active is not None
    assert (active.worker, active.progress, active.tags) == ("host:1:w", 0.25, ["batch-7"])


def foreign_read(
    r: redis.Redis, sha: str, namespace: str, queue: str, job_id: str
) -> tuple[str, dict[str, Any]]:
    """A job read as a client of another language reads it, from the doc alone: the
    keys by name, a first call naming no worker, a second naming those it replied."""
    prefix = f"{namespace}:{{{queue}}}:"
    keys = [prefix + s for s in SUFFIXES] + [f"{prefix}result:{job_id}"]
    workers: list[str] = []
    for _ in range(3):
        held = [f"{prefix}held:{w}" for w in workers]
        reply = r.evalsha(sha, len(keys) + len(held), *keys, *held, len(workers), *workers, job_id)
        assert reply[0] == 1  # the reply's version
        state = reply[1].decode()
        fields = {reply[i].decode(): reply[i + 1] for i in range(2, len(reply), 2)}
        if state != "stale":
            return state, fields
        workers = [w.decode() for w in fields["workers"]]
    raise AssertionError("the workers kept changing")


def expected_from(info: Optional[fastq.JobInfo]) -> dict[str, Any]:
    """What a foreign client decodes of the fields get_job shows."""
    assert info is not None
    return {
        "state": info.state,
        "name": info.name,
        "attempts": info.attempts,
        "error": info.last_error,
        "worker": info.worker,
        "tags": info.tags,
        "result": info.result if info.has_result else None,
    }


def decoded(state: str, f: dict[str, Any]) -> dict[str, Any]:
    """The foreign client's reading of the reply, with a JSON parser and nothing else."""

    def text(name: str) -> Optional[str]:
        return f[name].decode() if name in f else None

    return {
        "state": state,
        "name": text("name"),
        "attempts": f.get("attempts", 0),
        "error": text("error"),
        "worker": text("worker"),
        "tags": [t.decode() for t in f.get("tags", [])],
        "result": json.loads(f["result"]) if "result" in f else None,
    }


def test_a_foreign_client_reads_jobs_with_the_printed_script(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, jobs: dict[str, fastq.JobDef[Any]]
) -> None:
    ids = states(app, r, jobs)
    proc = run_cli(redis_server.url, "lua", "job_info", timeout=30)
    assert proc.returncode == 0, proc.stderr
    source = proc.stdout.encode()
    assert source.startswith(b"#!lua flags=allow-oom")  # it folds logged records
    plain = redis.Redis.from_url(redis_server.url)  # a plain client: no fastq code below
    sha = plain.script_load(source)
    assert sha == JOB_INFO.script.sha  # byte for byte what fastq loads
    for state, job_id in ids.items():
        got_state, fields = foreign_read(plain, sha, app.namespace, "q", job_id)
        assert decoded(got_state, fields) == expected_from(app.get_job(job_id)), state
    # the envelope is the documented one: args and kwargs with any JSON parser
    _, fields = foreign_read(plain, sha, app.namespace, "q", ids["queued"])
    envelope = json.loads(fields["envelope"])
    assert (envelope[0], envelope[1]) == ("hold", [2])
    assert foreign_read(plain, sha, app.namespace, "q", "no-such-job") == ("unknown", {})
    plain.close()


def test_a_job_of_a_sharded_queue_is_read_on_the_shard_its_id_routes_to(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="mail", shards=4)
    def send(to: str) -> None: ...

    ids = [send.enqueue_with(job_id=f"mail-{i}")(f"u{i}@example.com") for i in range(8)]
    sha = r.script_load(JOB_INFO.script.source)
    count = int(r.hget(f"{app.namespace}:shards", "mail") or 1)  # as the doc says: read it
    assert count == 4
    for job_id in ids:
        shard = zlib.crc32(job_id.encode()) % count
        queue = "mail" if shard == 0 else f"mail#{shard}"
        state, fields = foreign_read(r, sha, app.namespace, queue, job_id)
        assert state == "queued" and json.loads(fields["envelope"])[1] == [
            f"u{job_id[5:]}@example.com"
        ]
        info = app.get_job(job_id)
        assert info is not None and info.queue == "mail" and info.state == "queued"
