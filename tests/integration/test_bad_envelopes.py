"""A queue holding envelopes written by hand (``HSET``, past the enqueue script's
checks) is still listed and inspected: the bad ones are shown with what could not
be read, the others as always (issue 24: one ``enqueued_at: "yesterday"`` once
made ``dead list``, ``broken list``, ``inspect`` and ``app.get_job`` fail for the
whole queue)."""

from __future__ import annotations

import time

import orjson
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import run_cli

NOW_MS = int(time.time() * 1000)
DEAD = {
    "good-dead": ["send", [1], NOW_MS, {"attempts": 1, "error": "RuntimeError: x"}],
    "string-t": ["send", [2], "yesterday", {"attempts": "3", "error": 5, "traceback": 7}],
    "huge-t": ["send", [3], 1e300, {"failed_at": "x"}],
    "not-json": None,  # written as b"not json"
}
BROKEN = {
    "good-broken": ["send", "x", NOW_MS],
    "bad-broken": ["send", [], "yesterday"],
}


def write(r: redis.Redis, app: fastq.App) -> None:
    k = app.keys("mailer")
    r.sadd(f"{app.namespace}:queues", "mailer")
    for i, (job_id, env) in enumerate(DEAD.items()):
        r.hset(k.jobs, job_id, orjson.dumps(env) if env is not None else b"not json")
        r.zadd(k.dead, {job_id: NOW_MS + i})
    for job_id, env in BROKEN.items():
        r.hset(k.jobs, job_id, orjson.dumps(env))
        r.hset(k.broken, job_id, "args must be a JSON array")
    r.hset(k.jobs, "queued-bad", orjson.dumps(["send", [], "yesterday"]))
    r.lpush(k.ready, "queued-bad")


def test_listings_and_inspect_survive_a_bad_envelope(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    write(r, app)
    dead = {info.id: info for info in app.dead_jobs("mailer")}
    assert list(dead) == list(DEAD)
    good = dead["good-dead"]
    assert (good.name, good.attempts, good.last_error, good.unreadable) == (
        "send",
        1,
        "RuntimeError: x",
        None,
    )
    assert good.enqueued_at == NOW_MS / 1000
    bad = dead["string-t"]
    assert (bad.name, bad.args, bad.attempts, bad.enqueued_at) == ("send", [2], 0, None)
    assert (bad.last_error, bad.traceback) == ("5", "7")
    assert bad.unreadable == "attempts '3', enqueued_at 'yesterday' (not a time in ms)"
    assert (
        dead["huge-t"].unreadable
        == "enqueued_at 1e+300 (not a time in ms), failed_at 'x' (not a time in ms)"
    )
    assert dead["not-json"].unreadable is not None
    assert dead["not-json"].unreadable.startswith("not JSON")
    broken = {info.id: info for info in app.broken_jobs("mailer")}
    assert set(broken) == set(BROKEN)
    assert broken["good-broken"].unreadable == "args 'x'"
    assert broken["bad-broken"].unreadable == "enqueued_at 'yesterday' (not a time in ms)"
    for job_id, state in [*((i, "dead") for i in DEAD), *((i, "broken") for i in BROKEN)]:
        info = app.get_job(job_id)
        assert info is not None and info.state == state, job_id
    queued = app.get_job("queued-bad", "mailer")
    assert queued is not None and queued.state == "queued" and queued.enqueued_at is None

    base = ("-q", "mailer", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "dead", "list", *base)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(DEAD)
    assert lines[0] == "good-dead send attempts=1 RuntimeError: x"
    assert lines[1] == (
        "string-t send attempts=0 5 [unreadable envelope: attempts '3', enqueued_at "
        "'yesterday' (not a time in ms)]"
    )
    for extra in (("--json",), ("-v",)):
        proc = run_cli(redis_server.url, "dead", "list", *base, *extra)
        assert proc.returncode == 0 and "string-t" in proc.stdout, proc.stderr
    listed = orjson.loads(run_cli(redis_server.url, "dead", "list", *base, "--json").stdout)
    assert [job["unreadable"] is None for job in listed] == [True, False, False, False]
    proc = run_cli(redis_server.url, "broken", "list", *base)
    assert proc.returncode == 0, proc.stderr
    assert sorted(line.split()[0] for line in proc.stdout.splitlines()) == sorted(BROKEN)
    for job_id in [*DEAD, *BROKEN, "queued-bad"]:
        for extra in ((), ("--json",)):
            proc = run_cli(
                redis_server.url, "inspect", job_id, "--namespace", app.namespace, *extra
            )
            assert proc.returncode == 0, (job_id, proc.stderr)
            assert job_id in proc.stdout
