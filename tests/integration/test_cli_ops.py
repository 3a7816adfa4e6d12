"""The operator commands (stats, queues, dead, broken, enqueue, wait) as users run
them: real subprocesses on a real redis-server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import orjson
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, run_cli, subprocess_env, wait_while_working
from tests.support.workers import drain

OPS_APP = "tests.apps.ops_jobs"


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fastq: error: "), proc.stderr
    return lines[0]


def runs(r: redis.Redis, namespace: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{namespace}:runs").items()}


@pytest.fixture
def dead_five(redis_server: RedisServer, app: fastq.App, r: redis.Redis) -> list[str]:
    """Five ``flaky`` jobs of queue mailer, dead (retries=0) while broken_mode was set."""
    r.set(f"{app.namespace}:broken_mode", 1)
    ids = app.enqueue_many("flaky", [(i,) for i in range(5)], queue="mailer")
    proc = run_cli(
        redis_server.url, "worker", "--app", OPS_APP, "--namespace", app.namespace, "--burst"
    )
    assert proc.returncode == 0, proc.stderr
    r.delete(f"{app.namespace}:broken_mode")
    assert app.stats("mailer")["dead"] == 5
    return list(ids)


def test_one_dead_job_retried_or_deleted_by_its_id(
    redis_server: RedisServer, app: fastq.App, dead_five: list[str]
) -> None:
    base = ("-q", "mailer", "--namespace", app.namespace)
    first, second = dead_five[:2]
    proc = run_cli(redis_server.url, "dead", "purge", *base, "--id", first)
    assert (proc.returncode, proc.stdout) == (0, f"job {first} is deleted\n"), proc.stderr
    proc = run_cli(redis_server.url, "dead", "retry", *base, "--id", second)
    assert (proc.returncode, proc.stdout) == (0, f"job {second} is queued again\n"), proc.stderr
    assert app.stats("mailer")["dead"] == 3 and app.stats("mailer")["ready"] == 1
    proc = run_cli(redis_server.url, "dead", "purge", *base, "--id", first)
    assert proc.returncode == 1
    assert one_line_error(proc).endswith(f"job {first} is not dead in mailer: nothing done")
    proc = run_cli(redis_server.url, "dead", "list", *base, "--id", first)
    assert proc.returncode == 2 and "--id goes with retry and purge" in one_line_error(proc)


def test_dead_list_retry_and_purge(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, dead_five: list[str]
) -> None:
    base = ("-q", "mailer", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "dead", "list", *base)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == dead_five
    assert "flaky attempts=1 RuntimeError: smtp down for 0" in lines[0]
    listed = orjson.loads(run_cli(redis_server.url, "dead", "list", *base, "--json").stdout)
    assert [job["id"] for job in listed] == dead_five and listed[0]["traceback"]

    # the oldest three come back as new runs of the same ids, attempts reset
    proc = run_cli(redis_server.url, "dead", "retry", *base, "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    assert "put 3 dead jobs back in mailer, attempts reset" in proc.stdout
    stats = app.stats("mailer")
    assert (stats["ready"], stats["dead"], stats["revived"]) == (3, 2, 3)
    info = app.get_job(dead_five[0], "mailer")
    assert info is not None and info.state == "queued"
    assert (info.attempts, info.last_error, info.traceback) == (0, None, None)
    proc = run_cli(
        redis_server.url, "worker", "--app", OPS_APP, "--namespace", app.namespace, "--burst"
    )
    assert proc.returncode == 0, proc.stderr
    assert runs(r, app.namespace) == {0: 1, 1: 1, 2: 1}
    assert app.stats("mailer")["processed"] == 3

    # purge refuses without --yes, then deletes the two left
    proc = run_cli(redis_server.url, "dead", "purge", *base)
    assert proc.returncode == 2 and "--yes" in one_line_error(proc)
    assert app.stats("mailer")["dead"] == 2
    proc = run_cli(redis_server.url, "dead", "purge", *base, "--yes")
    assert proc.returncode == 0 and "purged 2 dead jobs from mailer" in proc.stdout
    assert app.stats("mailer")["dead"] == 0
    assert run_cli(redis_server.url, "dead", "list", *base).stdout == "no dead jobs in mailer\n"


def test_broken_jobs_go_back_once_the_app_knows_their_job(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    ids = app.enqueue_many("flaky", [(i,) for i in range(4)], queue="mailer")
    # a worker of an app that does not know `flaky` yet quarantines them (at once:
    # no grace period)
    old = fastq.App(redis_server.url, namespace=app.namespace, unknown_job_grace_s=0)
    old.job(queue="mailer", name="other")(lambda: None)
    drain(old, ["mailer"])
    old.close()
    assert app.stats("mailer")["broken"] == 4
    base = ("-q", "mailer", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "broken", "list", *base)
    assert sorted(line.split()[0] for line in proc.stdout.splitlines()) == sorted(ids)
    assert "unknown job name 'flaky'" in proc.stdout
    # one id quarantined without a payload cannot run again: it is skipped, not lost
    r.hset(app.keys("mailer").broken, "nopayload", "no envelope")
    proc = run_cli(redis_server.url, "broken", "retry", *base)
    assert proc.returncode == 0, proc.stderr
    assert "put 4 broken jobs back in mailer" in proc.stdout
    assert "1 broken jobs have no payload" in proc.stdout
    proc = run_cli(
        redis_server.url, "worker", "--app", OPS_APP, "--namespace", app.namespace, "--burst"
    )
    assert proc.returncode == 0, proc.stderr
    assert runs(r, app.namespace) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert (app.stats("mailer")["broken"], app.stats("mailer")["processed"]) == (1, 4)
    proc = run_cli(redis_server.url, "broken", "purge", *base, "--yes")
    assert proc.returncode == 0 and "purged 1 broken jobs" in proc.stdout


def test_enqueue_runs_the_job_and_refuses_bad_input(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    base = ("--app", OPS_APP, "--namespace", app.namespace)
    for args, message in (
        (["flaky", "--args", "[7"], "--args is not valid JSON"),
        (["flaky", "--args", '{"i": 7}'], "--args must be a JSON array"),
        (["flaky", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
        (["flakey", "--args", "[7]"], "unknown job 'flakey': the app registers flaky"),
        (["flaky", "--args", "[7]", "--in", "soon"], "invalid duration 'soon'"),
        (["flaky", "--args", "[7]", "-q", "mailr"], "unknown queue 'mailr'"),
        (["flaky", "--args", "[7, 8]"], "flaky"),  # does not bind: the TypeError's text
    ):
        proc = run_cli(redis_server.url, "enqueue", *args, *base)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in one_line_error(proc), args
    assert r.exists(app.keys("mailer").jobs) == 0  # nothing written
    proc = run_cli(redis_server.url, "enqueue", "flaky", "--args", "[7]", *base)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    proc = run_cli(
        redis_server.url, "enqueue", "flaky", "--kwargs", '{"i": 8}', "--in", "1h", *base
    )
    assert proc.returncode == 0, proc.stderr
    stats = app.stats("mailer")
    assert (stats["ready"], stats["scheduled"]) == (1, 1)
    info = app.get_job(job_id, "mailer")
    assert info is not None and (info.name, info.args) == ("flaky", [7])


def test_queues_and_stats_list_an_invalid_name_without_crashing(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    app.enqueue_many("flaky", [(i,) for i in range(3)], queue="mailer")
    r.sadd(f"{app.namespace}:queues", "bad name{x}")  # written by a foreign producer
    proc = run_cli(redis_server.url, "queues", "--namespace", app.namespace)
    assert proc.returncode == 0, proc.stderr
    assert "mailer ready=3 inflight=0 scheduled=0 dead=0 broken=0" in proc.stdout
    assert "'bad name{x}' invalid queue name" in proc.stdout
    proc = run_cli(redis_server.url, "stats", "--namespace", app.namespace, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = orjson.loads(proc.stdout)
    assert list(rows) == ["mailer"]
    assert rows["mailer"] == {
        "ready": 3,
        "inflight": 0,
        "scheduled": 0,
        "dead": 0,
        "broken": 0,
        "processed": 0,
        "failed": 0,
        "retried": 0,
        "stalled": 0,
        "orphaned": 0,
        "stale_acks": 0,
        "enqueued": 3,
        "interrupted": 0,
        "purged": 0,
        "cancelled": 0,
        "revived": 0,
        "total_dead": 0,
        "total_broken": 0,
        "rate": None,
        "limit": None,
        "paused": False,
        "workers": 0,
    }


def test_stats_shows_the_fault_counters_plain_and_json(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    """What workers, the pool and the reaper count when things go wrong (stalls,
    hand-backs from a dead worker, acks too late to count) is in both outputs, as
    app.stats() says it."""
    app.enqueue_many("flaky", [(i,) for i in range(2)], queue="mailer")
    # as release.lua and ack.lua count them
    r.hset(
        app.keys("mailer").stats,
        mapping={"stalled": 3, "orphaned": 2, "stale_acks": 5, "retried": 7},
    )
    expected = app.stats("mailer")
    base = ("-q", "mailer", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "stats", *base, "--json")
    assert proc.returncode == 0, proc.stderr
    row = orjson.loads(proc.stdout)["mailer"]
    assert (row["stalled"], row["orphaned"], row["stale_acks"], row["retried"]) == (3, 2, 5, 7)
    counters = {k: v for k, v in expected.items() if not k.startswith("rate") and k != "paused"}
    assert {k: row[k] for k in counters} == counters
    proc = run_cli(redis_server.url, "stats", *base)
    assert proc.returncode == 0, proc.stderr
    assert "ready=2 " in proc.stdout
    assert " retried=7 stalled=3 orphaned=2 stale_acks=5 " in proc.stdout, proc.stdout


def test_wait_shows_progress_until_drained_and_times_out_otherwise(
    redis_server: RedisServer, app: fastq.App
) -> None:
    app.enqueue_many("flaky", [(i,) for i in range(2000)], queue="mailer")
    base = ("-q", "mailer", "--namespace", app.namespace)
    # nobody works the queue: a timeout, exit 1
    proc = run_cli(redis_server.url, "wait", *base, "--timeout", "0.3s", "--interval", "0.1")
    assert proc.returncode == 1 and "not drained within 0.3s" in proc.stderr
    assert "mailer: 0/2000 done" in proc.stdout
    worker = fastq_cmd(
        "worker", "--app", OPS_APP, "--namespace", app.namespace, "--burst", "--batch", "10"
    )
    proc = wait_while_working(redis_server.url, [*base, "--interval", "0.05"], worker)
    assert proc.returncode == 0, proc.stderr
    # stdout is not a terminal: plain lines, from 0 (the worker starts after the first)
    # to the total
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("mailer: 0/2000 done,"), proc.stdout
    assert lines[-2].startswith("mailer: 2000/2000 done,"), proc.stdout
    assert lines[-1] == "mailer drained: 2000 done, 0 failed, 0 dead"
    assert app.stats("mailer")["processed"] == 2000


PASSWORD = "s3cret-pw"


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=["--requirepass", PASSWORD]).start()
    yield server
    server.cleanup()


COMMANDS = [
    ["stats"],
    ["queues"],
    ["dead", "list", "-q", "mailer"],
    ["dead", "retry", "-q", "mailer"],
    ["broken", "retry", "-q", "mailer"],
    ["enqueue", "flaky", "--args", "[1]", "-q", "mailer"],
    ["wait", "-q", "mailer"],
    ["pause", "--app", OPS_APP, "-q", "mailer"],
    ["inspect", "--app", OPS_APP, "someid"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_fails_in_one_line_on_a_wrong_password_or_no_redis(
    password_server: RedisServer, command: list[str]
) -> None:
    port = password_server.port
    wrong = f"redis://:wrong-{PASSWORD}@127.0.0.1:{port}/0"
    proc = run_cli(wrong, *command)
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc)
    assert "access denied" in line and "redis://:***@127.0.0.1" in line
    assert PASSWORD not in proc.stdout + proc.stderr
    # none at all: the same
    proc = run_cli(f"redis://127.0.0.1:{port}/0", *command)
    assert proc.returncode == 1 and "access denied" in one_line_error(proc)
    # nothing listening: one line, no retry storm
    proc = run_cli(f"redis://:{PASSWORD}@127.0.0.1:1/0", *command)
    assert proc.returncode == 1 and "cannot reach Redis at redis://:***@127.0.0.1:1/0" in (
        one_line_error(proc)
    )
    assert PASSWORD not in proc.stdout + proc.stderr


def test_the_right_password_works(password_server: RedisServer) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{password_server.port}/0"
    proc = run_cli(url, "enqueue", "flaky", "--args", "[1]", "-q", "mailer", "--new-queue")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(url, "stats", "-q", "mailer")
    assert proc.returncode == 0 and "mailer ready=1 " in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dead", "list", "-q", "nope"], "unknown queue 'nope'"),
        (["dead", "retry", "-q", "a:b"], "invalid queue name 'a:b'"),
        (["dead", "retry", "-q", "mailer", "--limit", "0"], "limit must be an int >= 1"),
        (["dead", "purge", "-q", "mailer", "--limit", "3", "--yes"], "--limit goes with"),
        (["dead", "bury", "-q", "mailer"], "invalid choice: 'bury'"),
        (["broken", "list", "-q", "nope"], "unknown queue 'nope'"),
        (["stats", "-q", "nope"], "unknown queue 'nope'"),
        (["stats", "--interval", "0"], "--interval must be > 0"),
        (["wait", "-q", "nope"], "unknown queue 'nope'"),
        (["wait", "-q", "mailer", "--timeout", "later"], "invalid duration 'later'"),
        (["queues", "--redis-url", "nope://x"], "invalid Redis URL"),
        (["stats", "--namespace", "a b"], "namespace"),
        (["worker", "--app", OPS_APP, "--unknown-job-grace", "later"], "invalid duration 'later'"),
        (["pool", "--app", OPS_APP, "--unknown-job-grace=-5m"], "must be finite and >= 0"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, args: list[str], message: str
) -> None:
    app.enqueue("flaky", [1], queue="mailer")
    before = sorted(r.scan_iter(match=f"{app.namespace}:*"))
    proc = run_cli(
        redis_server.url,
        *args,
        *(["--namespace", app.namespace] if "--namespace" not in args else []),
    )
    assert proc.returncode == 2, proc.stderr
    assert message in one_line_error(proc)
    assert sorted(r.scan_iter(match=f"{app.namespace}:*")) == before


def test_version_log_level_after_the_command_and_help(redis_server: RedisServer) -> None:
    proc = run_cli(redis_server.url, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"fastq {fastq.__version__}"
    proc = run_cli(redis_server.url, "queues", "--namespace", "tnone", "--log-level", "DEBUG")
    assert proc.returncode == 0 and "no queues" in proc.stdout
    proc = run_cli(redis_server.url, "queues", "--log-level", "LOUD")
    assert proc.returncode == 2 and "unknown log level 'LOUD'" in one_line_error(proc)
    helped = run_cli(redis_server.url, "pool", "--help").stdout
    assert "(default: 100)" in helped and "examples:" in helped
    assert "fastq pool --app myapp -c 8" in helped
    assert "fastq dead retry -q mailer" in run_cli(redis_server.url, "--help").stdout


def test_worker_setup_mistakes_are_said(redis_server: RedisServer, app: fastq.App) -> None:
    base = ("--namespace", app.namespace, "--burst")
    proc = run_cli(redis_server.url, "worker", "--app", OPS_APP, "-q", "mailr", *base)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING fastq.cli: queue 'mailr' is unknown" in proc.stderr
    assert "a typo? known: mailer" in proc.stderr
    proc = run_cli(redis_server.url, "worker", "--app", "tests.apps.no_jobs", *base)
    assert proc.returncode == 3
    assert "app 'tests.apps.no_jobs' registers no jobs" in one_line_error(proc)
    proc = run_cli(redis_server.url, "worker", "--app", "tests.apps.broken_import", *base)
    assert proc.returncode == 3
    assert "tests/apps/broken_import.py, line 3)" in one_line_error(proc)


def test_worker_banner_and_failure_logs(
    password_server: RedisServer, r: redis.Redis, namespace: str
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{password_server.port}/0"
    client = redis.Redis.from_url(url)
    client.set(f"{namespace}:broken_mode", 1)
    producer = fastq.App(url, namespace=namespace)
    producer.enqueue("flaky", [1], queue="mailer")
    proc = run_cli(url, "worker", "--app", OPS_APP, "--namespace", namespace, "--burst")
    assert proc.returncode == 0, proc.stderr
    banner = next(line for line in proc.stderr.splitlines() if "namespace" in line)
    assert f"Redis redis://:***@127.0.0.1:{password_server.port}/0" in banner
    assert f"namespace {namespace}, queues mailer,slow, jobs flaky,hold" in banner
    assert PASSWORD not in proc.stderr
    # a death: one ERROR line, then its traceback (as Celery and RQ log it)
    assert "is dead: failed after 1 attempt: RuntimeError: smtp down for 1" in proc.stderr
    assert 'ops_jobs.py", line' in proc.stderr
    assert "ran (attempt" not in proc.stderr  # per-job lines only at DEBUG
    producer.enqueue("flaky", [2], queue="mailer")
    client.delete(f"{namespace}:broken_mode")
    proc = run_cli(
        url, "worker", "--app", OPS_APP, "--namespace", namespace, "--burst", "--log-level", "DEBUG"
    )
    assert proc.returncode == 0, proc.stderr
    assert "DEBUG fastq.worker: job flaky" in proc.stderr and "ran (attempt 1)" in proc.stderr
    producer.close()
    client.close()


def test_stats_watch_prints_a_sample_each_interval_with_the_rate(
    redis_server: RedisServer, app: fastq.App
) -> None:
    app.enqueue_many("flaky", [(i,) for i in range(5)], queue="mailer")
    proc = subprocess.Popen(
        fastq_cmd("stats", "--namespace", app.namespace, "--watch", "--json", "--interval", "0.1"),
        env=subprocess_env(redis_server.url),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first, second = orjson.loads(proc.stdout.readline()), orjson.loads(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert first["mailer"]["ready"] == 5 and first["mailer"]["rate"] is None
    assert second["mailer"]["rate"] == 0.0  # nothing processed between the samples


def test_workers_lists_who_holds_which_job(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    job_id = app.enqueue("hold", [1], queue="slow")
    base = ("--namespace", app.namespace)
    proc = run_cli(redis_server.url, "workers", *base)
    assert proc.returncode == 0 and proc.stdout == (
        f"no pool or worker serves any queue now (on {redis_server.url}, namespace "
        f"{app.namespace!r})\n"
    )
    worker = subprocess.Popen(
        fastq_cmd("worker", "--app", OPS_APP, *base, "-q", "slow", "--burst"),
        env=subprocess_env(redis_server.url),
        stderr=subprocess.DEVNULL,
    )
    try:
        # polled: a BLPOP of 30 s outlasts the client's socket timeout (5 s with redis-py 7)
        wait_until(lambda: r.lpop(f"{app.namespace}:started") is not None, 30, "the job to start")
        proc = run_cli(redis_server.url, "workers", *base, "-q", "slow", "-v")
        assert proc.returncode == 0, proc.stderr
        alone, child, holding, head, job = proc.stdout.splitlines()
        assert alone.startswith("worker (alone) ") and " on slow: 1 worker, since " in alone
        assert child.startswith(f"  worker {worker.pid} ") and " done=0" in child
        assert holding == "holding jobs now:"
        assert head.startswith("slow ") and " jobs=1 lease=+" in head
        assert job == f"  {job_id} hold"
        listed = orjson.loads(run_cli(redis_server.url, "workers", *base, "--json").stdout)
        holders = listed["holders"]
        assert [(h["queue"], h["jobs"]) for h in holders] == [("slow", {job_id: "hold"})]
        [process] = listed["processes"]
        assert (process["kind"], process["pid"], process["queues"]) == (
            "worker",
            worker.pid,
            ["slow"],
        )
    finally:
        r.rpush(f"{app.namespace}:release", 1)
        assert worker.wait(timeout=30) == 0
    # a worker that stopped withdrew its entry
    assert orjson.loads(run_cli(redis_server.url, "workers", *base, "--json").stdout) == {
        "processes": [],
        "holders": [],
    }
    proc = run_cli(redis_server.url, "workers", *base, "-q", "nope")
    assert proc.returncode == 2 and "unknown queue 'nope'" in one_line_error(proc)


def test_flow_inspect_and_tag_commands_need_no_app(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    """pause, resume, limit, inspect, jobs, cancel and purge act on Redis alone."""
    ns = ("--namespace", app.namespace)
    url = redis_server.url
    first, second = app.enqueue_many("flaky", [(1,), (2,)], queue="mailer")
    tagged = app.enqueue("flaky", [3], queue="mailer", tags=["blast-7"])

    def ok(*args: str) -> str:
        proc = run_cli(url, *args, *ns)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert ok("pause", "-q", "mailer").startswith("paused mailer")
    assert app.stats("mailer")["paused"] == 1
    ok("resume", "-q", "mailer")
    assert app.stats("mailer")["paused"] == 0
    assert ok("limit", "mailer", "14/s").startswith("mailer: at most 14/s")
    assert ok("limit", "mailer").startswith("mailer: 14/s")
    assert '"args": [\n    1\n  ]' in ok("inspect", first, "--json")
    assert ok("jobs", "--tag", "blast-7").split() == [tagged, "mailer", "queued"]
    assert ok("cancel", second).strip() == f"cancelled {second} (stopped: it will not run)"
    purged = ok("purge", "-q", "mailer", "--yes").strip()
    # 2: the cancelled id's entry, still in the ready list, is dropped but not counted
    assert purged == "purged 2 jobs (ready, scheduled) from mailer"
    assert app.stats("mailer")["ready"] == 0
    # an unknown queue is still one line and exit 2, without --app too
    proc = run_cli(url, "pause", "-q", "mailr", *ns)
    assert proc.returncode == 2 and "unknown queue 'mailr'" in one_line_error(proc)
