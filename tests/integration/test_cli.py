"""The ``fastq`` command as users run it: real subprocesses on a real redis-server."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import fastq_cmd, run_cli, subprocess_env


@pytest.mark.slow
def test_burst_worker_drains_10000_jobs_each_once(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    ids = app.enqueue_many("count", [(i,) for i in range(10_000)], queue="count")
    assert len(set(ids)) == 10_000
    proc = run_cli(
        redis_server.url,
        "worker",
        "--app",
        "tests.apps.counting",
        "--namespace",
        app.namespace,
        "-q",
        "count",
        "--burst",
        "--batch",
        "200",
    )
    assert proc.returncode == 0, proc.stderr
    runs = {int(k): int(v) for k, v in r.hgetall(f"{app.namespace}:runs").items()}
    assert len(runs) == 10_000 and set(runs.values()) == {1}
    stats = app.stats("count")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["stale_acks"]) == (
        10_000,
        0,
        0,
        0,
    )


def test_sigterm_stops_a_worker_gracefully_without_losing_jobs(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis
) -> None:
    app.enqueue_many("count", [(i,) for i in range(3000)], queue="count")
    proc = subprocess.Popen(
        fastq_cmd(
            "worker",
            "--app",
            "tests.apps.counting",
            "--namespace",
            app.namespace,
            "-q",
            "count",
            "--batch",
            "50",
        ),
        env=subprocess_env(redis_server.url),
    )
    deadline = time.monotonic() + 20
    while r.hlen(f"{app.namespace}:runs") < 200 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    stats = app.stats("count")
    runs = {int(k): int(v) for k, v in r.hgetall(f"{app.namespace}:runs").items()}
    # nothing lost, nothing run twice, nothing left leased
    assert stats["inflight"] == 0
    assert set(runs.values()) == {1}
    assert stats["processed"] == len(runs)
    assert stats["ready"] + len(runs) == 3000


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["worker", "--app", "tests.apps.counting", "-q", "good,bad:name"],
            2,
            "invalid queue name 'bad:name'",
        ),
        (["worker", "--app", "tests.apps.counting", "-q", "{x}"], 2, "invalid queue name"),
        (
            ["worker", "--app", "no_such_module_anywhere", "-q", "a"],
            3,
            "cannot import app module 'no_such_module_anywhere'",
        ),
        (
            ["worker", "--app", "tests.apps.broken_import", "-q", "a"],
            3,
            "RuntimeError: this module fails on import",
        ),
        (
            ["worker", "--app", "tests.apps.counting:nope", "-q", "a"],
            3,
            "module 'tests.apps.counting' has no attribute 'nope' (its fastq.App: app)",
        ),
        (
            ["worker", "--app", "tests.apps.counting:count", "-q", "a"],
            3,
            "tests.apps.counting:count is a JobDef, not a fastq.App",
        ),
        (
            ["worker", "--app", "tests/apps/counting.py", "-q", "a"],
            3,
            "--app takes a module, not a file: --app tests.apps.counting",
        ),
        (
            ["worker", "--app", "tests.apps.counting", "--no-such-option"],
            2,
            "unrecognized arguments: --no-such-option",
        ),
        (
            ["worker", "--app", "tests.apps.counting", "--batch", "0"],
            2,
            "--batch must be within 1..1000",
        ),
        (
            ["worker", "--app", "tests.apps.counting", "--burst", "--burst-horizon", "-1"],
            2,
            "--burst-horizon must be finite seconds >= 0",
        ),
        (
            ["worker", "--app", "tests.apps.counting", "--burst-horizon", "soon"],
            2,
            "--burst-horizon must be a number of seconds",
        ),
        (["worker"], 2, "the following arguments are required: --app"),
        (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
        (
            ["worker", "--app", "tests.apps.counting", "--redis-url", "nope://x"],
            2,
            "invalid Redis URL",
        ),
        (["pool", "--app", "tests.apps.counting", "-c", "0"], 2, "-c must be >= 1"),
        (
            ["pool", "--app", "tests.apps.counting", "--max-memory-per-child", "lots"],
            2,
            "invalid size",
        ),
    ],
)
def test_cli_errors_are_one_line_with_nonzero_exit(
    redis_server: RedisServer, args: list[str], code: int, message: str
) -> None:
    proc = run_cli(redis_server.url, *args, timeout=30)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fastq: error: ") and message in lines[0]


def test_stats_command(redis_server: RedisServer, app: fastq.App) -> None:
    app.enqueue_many("count", [(i,) for i in range(5)], queue="count")
    proc = run_cli(
        redis_server.url,
        "stats",
        "--app",
        "tests.apps.counting",
        "--namespace",
        app.namespace,
        "-q",
        "count",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("count ") and " ready=5 " in proc.stdout


@pytest.mark.slow
def test_demo_runs_a_blast_on_its_own_throwaway_redis() -> None:
    proc = subprocess.run(
        fastq_cmd("demo", "--jobs", "3000"),
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env("redis://127.0.0.1:1/0"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "throwaway redis-server" in proc.stdout
    assert "processed=3000 failed=0 dead=0 ready=0 inflight=0" in proc.stdout
    # its own server keeps an append-only file: the pool's check has nothing to warn of
    assert "persists nothing" not in proc.stderr, proc.stderr


def test_an_idle_worker_stops_at_once_on_sigterm(redis_server: RedisServer, app: fastq.App) -> None:
    proc = subprocess.Popen(
        fastq_cmd(
            "worker", "--app", "tests.apps.counting", "--namespace", app.namespace, "-q", "count"
        ),
        env=subprocess_env(redis_server.url),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # it names its queues once its signal handlers are in place (a sleep of 1.5 s
    # here was not always enough for a loaded box to start Python and import fastq)
    lines = [proc.stderr.readline()]
    while lines[-1] and ", queues count" not in lines[-1]:
        lines.append(proc.stderr.readline())
    assert lines[-1], "".join(lines)
    time.sleep(0.5)  # found nothing, now blocked waiting for work (5 s waits)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    # not the rest of the idle wait (4.5 s at least): its stop alone took 1.2 s on
    # a loaded machine
    assert time.monotonic() - t0 < 3.0
    assert "stopped after 0 jobs" in proc.stderr.read()


def test_a_worker_stopped_during_its_round_trip_does_not_sit_out_an_idle_wait(
    redis_server: RedisServer, app: fastq.App
) -> None:
    from fastq.worker.worker import Worker

    worker = Worker(app, ["q"], handle_signals=False, idle_timeout_s=30)
    worker.init_process()
    assert worker._rt is not None
    send = worker._rt.request

    def stop_mid_round_trip(*args, **kwargs):  # type: ignore[no-untyped-def]
        worker.stop()  # as a SIGTERM arriving while the claim is on the wire
        return send(*args, **kwargs)

    worker._rt.request = stop_mid_round_trip  # type: ignore[method-assign]
    t0 = time.monotonic()
    worker.run_loop()
    assert time.monotonic() - t0 < 2  # not the 30 s idle wait


def test_cli_pause_resume_and_purge(redis_server: RedisServer, app: fastq.App) -> None:
    app.enqueue_many("count", [(i,) for i in range(300)], queue="count")
    app.enqueue_many("count", [(i,) for i in range(20)], queue="count", delay_s=3600)
    base = ("--app", "tests.apps.counting", "--namespace", app.namespace, "-q", "count")
    proc = run_cli(redis_server.url, "pause", *base)
    assert proc.returncode == 0, proc.stderr
    assert "paused count" in proc.stdout and app.stats("count")["paused"] == 1
    # a burst worker on a paused queue claims nothing and stops
    proc = run_cli(redis_server.url, "worker", *base, "--burst")
    assert proc.returncode == 0, proc.stderr
    assert app.stats("count")["ready"] == 300
    proc = run_cli(redis_server.url, "resume", *base)
    assert proc.returncode == 0 and "resumed count" in proc.stdout
    assert app.stats("count")["paused"] == 0
    # not a terminal and no --yes: refused, nothing deleted
    proc = run_cli(redis_server.url, "purge", *base)
    assert proc.returncode == 2 and "--yes" in proc.stderr and "nothing was deleted" in proc.stderr
    assert app.stats("count")["ready"] == 300
    proc = run_cli(redis_server.url, "purge", *base, "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "purged 320 jobs (ready, scheduled) from count" in proc.stdout
    assert (app.stats("count")["ready"], app.stats("count")["scheduled"]) == (0, 0)


@pytest.mark.parametrize("verb", ["pause", "resume", "purge"])
def test_cli_flow_commands_refuse_an_unknown_or_bad_queue_in_one_line(
    redis_server: RedisServer, app: fastq.App, verb: str
) -> None:
    base = ("--app", "tests.apps.counting", "--namespace", app.namespace)
    for queue, message in (("nope", "unknown queue 'nope'"), ("a:b", "queue name")):
        extra = ("--yes",) if verb == "purge" else ()
        proc = run_cli(redis_server.url, verb, *base, "-q", queue, *extra)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("answer", "code", "left"), [("n\n", 1, 5), ("yes\n", 0, 0)])
def test_cli_purge_asks_on_a_terminal(
    redis_server: RedisServer, app: fastq.App, answer: str, code: int, left: int
) -> None:
    import os

    app.enqueue_many("count", [(i,) for i in range(5)], queue="count")
    leader, follower = os.openpty()
    try:
        os.write(leader, answer.encode())
        proc = subprocess.run(
            fastq_cmd(
                "purge",
                "--app",
                "tests.apps.counting",
                "--namespace",
                app.namespace,
                "-q",
                "count",
            ),
            env=subprocess_env(redis_server.url),
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == code, proc.stderr
    assert app.stats("count")["ready"] == left


# -- --async-jobs, and its old spelling --concurrency -------------------------------------

DEPRECATED = "fastq: warning: --concurrency is deprecated"


@pytest.mark.parametrize("option", ["--async-jobs", "--concurrency"])
def test_a_worker_keeps_async_jobs_in_flight_as_asked_in_either_spelling(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, option: str
) -> None:
    app.enqueue_many("hold", [(0.5,)] * 10, queue="inflight")
    proc = run_cli(
        redis_server.url,
        "worker",
        "--app",
        "tests.apps.in_flight",
        "--namespace",
        app.namespace,
        "--burst",
        option,
        "5",
    )
    assert proc.returncode == 0, proc.stderr
    assert int(r.hget(f"{app.namespace}:runs", "hold") or 0) == 10
    assert [int(peak) for peak in r.hvals(f"{app.namespace}:peak")] == [5]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("fastq: warning")]
    if option == "--async-jobs":
        assert warnings == []
    else:
        assert warnings == [
            f"{DEPRECATED}: it sets the async def jobs in flight per worker process, "
            "use --async-jobs"
        ]


@pytest.mark.parametrize("option", ["--async-jobs", "--concurrency"])
def test_a_pools_children_keep_async_jobs_in_flight_as_asked_in_either_spelling(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, option: str
) -> None:
    app.enqueue_many("hold", [(0.5,)] * 10, queue="inflight")
    proc = subprocess.Popen(
        fastq_cmd(
            "pool",
            "-c",
            "1",
            option,
            "5",
            "--app",
            "tests.apps.in_flight",
            "--namespace",
            app.namespace,
            "--no-reaper",
        ),
        env=subprocess_env(redis_server.url),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while int(r.hget(f"{app.namespace}:runs", "hold") or 0) < 10:
            assert time.monotonic() < deadline and proc.poll() is None, "not drained"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert [int(peak) for peak in r.hvals(f"{app.namespace}:peak")] == [5]
    warnings = [line for line in stderr.splitlines() if line.startswith("fastq: warning")]
    if option == "--async-jobs":
        assert warnings == []
    else:  # and a Celery user learns what -c is
        assert warnings == [
            f"{DEPRECATED}: it sets the async def jobs in flight per worker process, "
            "use --async-jobs; -c/--children sets the processes"
        ]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--async-jobs", "0", "--async-jobs must be within 1..10000, not 0"),
        ("--async-jobs", "many", "--async-jobs must be a whole number, not 'many'"),
        ("--concurrency", "0", "--concurrency must be within 1..10000, not 0"),
    ],
)
def test_a_bad_number_of_async_jobs_is_a_one_line_error_in_either_spelling(
    redis_server: RedisServer, option: str, value: str, message: str
) -> None:
    proc = run_cli(redis_server.url, "worker", "--app", "tests.apps.in_flight", option, value)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"fastq: error: {message}"]


def test_commands_run_to_their_end_are_forked_from_the_zygote(redis_server: RedisServer) -> None:
    """run_cli (tests/support/processes.py) forks a command from a process that
    imported fastq once, in a test as pytest runs it (it sets PYTEST_CURRENT_TEST at
    each phase): its exit code and both outputs are the command's."""
    from tests.support import processes

    before = processes._zygote().forked
    proc = run_cli(redis_server.url, "--version")
    assert (proc.returncode, proc.stdout.startswith("fastq "), proc.stderr) == (0, True, "")
    proc = run_cli(redis_server.url, "stats", "-q", "no such queue!")
    assert proc.returncode == 2 and proc.stderr.startswith("fastq: error: "), proc.stderr
    assert processes._zygote().forked == before + 2
