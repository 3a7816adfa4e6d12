"""Periodic jobs against a real redis-server: pools and reapers fire each slot once,
missed slots give one run, and ``fastq periodic`` lists the schedules."""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

import fastq
from fastq.protocol.contracts import FIRE, FireOutcome
from fastq.reaper.firer import Firer
from fastq.testing.redis_server import RedisServer
from tests.support.periodic import check_each_slot_once, recorded_runs
from tests.support.processes import fastq_cmd, run_cli, subprocess_env

APP = "tests.apps.periodic_jobs"


class Procs:
    """``fastq`` subprocesses of one test, stopped (then killed) at its end."""

    def __init__(self, url: str, namespace: str, log_dir: Path) -> None:
        self.url, self.namespace, self.log_dir = url, namespace, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"proc{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            fastq_cmd("--log-level", "INFO", *args, "--app", APP, "--namespace", self.namespace),
            env=subprocess_env(self.url),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))


@pytest.fixture
def procs(redis_server: RedisServer, namespace: str, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(redis_server.url, namespace, tmp_path)
    yield p
    p.stop()


@pytest.mark.slow
def test_two_pools_and_a_reaper_fire_each_slot_exactly_once(
    procs: Procs, r: redis.Redis, app: fastq.App, namespace: str
) -> None:
    # no -q: the pools serve the app's queues, "ticks" among them
    procs.start("pool", "-c", "1")
    procs.start("pool", "-c", "1")
    procs.start("reaper")
    k = app.keys("ticks")
    deadline = time.monotonic() + 30
    while not recorded_runs(r, namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorded_runs(r, namespace), procs.logs()
    late_looks = 0
    looked: set[int] = set()
    end = time.monotonic() + 22
    while time.monotonic() < end:
        # a reaper looking late at a slot whose run has finished fires nothing
        last = r.hget(k.periodic, "tick")
        if last is not None and int(last) not in looked:
            slot = int(last)
            run_id = f"periodic:tick:{slot}"
            if r.hexists(k.jobs, run_id) == 0:
                looked.add(slot)
                argv = FIRE.argv("tick", slot, False, 0, run_id, b'{"id":"x"}')
                assert FIRE.call(r, FIRE.keys_for(k), argv).outcome is FireOutcome.ALREADY
                late_looks += 1
        time.sleep(0.05)
    procs.stop()
    started = recorded_runs(r, namespace)
    assert len(started) >= 20, procs.logs()
    # once per slot, and no slot missed between the first and the last
    check_each_slot_once([slot for slot, _ in started], procs.logs())
    assert late_looks >= 10
    # every run enqueued started, but one fired just before the stop may still wait
    left = app.stats("ticks")
    assert left["inflight"] == 0 and left["scheduled"] == 0
    assert int(r.hget(k.stats, "enqueued") or 0) == len(started) + left["ready"]
    assert left["ready"] <= 1
    # each run started soon after its slot: a reaper sleeps until the slot; one that
    # polled every second would start them ~500 ms late on the median. (~5 ms here on a
    # quiet box; the bound leaves room for a loaded CI one.)
    lateness_ms = sorted(t - slot for slot, t in started)
    assert statistics.median(lateness_ms) < 250, lateness_ms
    print(
        f"{len(started)} slots; start - slot: median {statistics.median(lateness_ms):.1f} ms, "
        f"max {lateness_ms[-1]:.1f} ms"
    )


def test_missed_slots_give_one_run_and_the_firer_sleeps_until_the_next(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.periodic(every_s=1, queue="ticks")
    def tick() -> None: ...

    k = app.keys("ticks")
    now_ms = int(time.time() * 1000)
    r.hset(k.periodic, "tick", now_ms // 1000 * 1000 - 10_000)  # down for ten slots
    firer = Firer(app)
    wait_s = firer.fire_due(r)
    assert 0 < wait_s <= 1.01
    ready = r.lrange(k.ready, 0, -1)
    assert len(ready) == 1
    slot = int(ready[0].decode().rsplit(":", 1)[1])
    assert slot == int(r.hget(k.periodic, "tick") or 0) and slot >= now_ms // 1000 * 1000
    # a second reaper, on a schedule it never saw fired, waits for the next slot
    assert Firer(app).fire_due(r) > 0
    assert r.llen(k.ready) == 1
    # the run still queued: the next slot is skipped, not stacked
    time.sleep(wait_s)
    firer.fire_due(r)
    assert r.llen(k.ready) == 1
    assert r.hget(k.stats, "periodic_skipped") == b"1"


def test_the_firer_fires_only_its_queues(app: fastq.App, r: redis.Redis) -> None:
    @app.periodic(every_s=1, queue="a")
    def a() -> None: ...

    @app.periodic(every_s=1, queue="b")
    def b() -> None: ...

    assert [j.name for j in Firer(app, ["b"]).jobs] == ["b"]
    assert Firer(app, ["c"]).fire_due(r) == float("inf")


def test_fastq_periodic_lists_last_and_next_fire_times(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, namespace: str
) -> None:
    args = ("periodic", "--app", APP, "--namespace", namespace)
    first = run_cli(redis_server.url, *args)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "QUEUE",
        "SCHEDULE",
        "OVERLAP",
        "LAST",
        "FIRED",
        "NEXT",
        "FIRE",
        "LAST",
        "RUN",
    ]
    tick, vacuum = lines[1], lines[2]
    assert tick.split()[:5] == ["tick", "ticks", "every", "1s", "no"]
    assert "never" in tick
    assert vacuum.split()[:4] == ["vacuum", "maint", "cron", "'30"]
    assert "Europe/Berlin" in vacuum and "yes" in vacuum and "never" in vacuum
    assert "T02:30:00+0" in vacuum  # the next 02:30 in Berlin, with its offset

    r.hset(app.keys("ticks").periodic, "tick", 1_700_000_000_000)
    r.hset(app.keys("ticks").periodic_run, "tick", "periodic:tick:1700000000000")
    second = run_cli(redis_server.url, *args)
    tick = second.stdout.splitlines()[1]
    assert "2023-11-14T22:13:20+00:00" in tick  # the last slot fired
    assert "2023-11-14T22:13:21+00:00 (missed: fires when a reaper runs)" in tick
    assert tick.endswith("periodic:tick:1700000000000")


def test_fastq_periodic_without_schedules(redis_server: RedisServer, namespace: str) -> None:
    proc = run_cli(
        redis_server.url, "periodic", "--app", "tests.apps.counting", "--namespace", namespace
    )
    assert (proc.returncode, proc.stdout) == (0, "no periodic jobs\n")


HUP_APP = """
import os
import fastq

app = fastq.App(os.environ["FASTQ_REDIS_URL"])


@app.periodic(every_s=1, queue={queue!r})
def {name}() -> None:
    app.redis.rpush(app.namespace + ":ran", {name!r})
"""


@pytest.mark.slow
def test_a_hup_reloads_the_schedules_and_serves_their_new_queues(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    module = tmp_path / "hup_app.py"
    module.write_text(HUP_APP.format(queue="ticks", name="first"))
    env = subprocess_env(redis_server.url)
    env["PYTHONPATH"] += f":{tmp_path}"
    with open(tmp_path / "pool.log", "wb") as log:
        pool = subprocess.Popen(
            fastq_cmd("pool", "-c", "1", "--app", "hup_app", "--namespace", namespace),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def ran() -> list[bytes]:
            return r.lrange(f"{namespace}:ran", 0, -1)

        deadline = time.monotonic() + 30
        while b"first" not in ran() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"first" in ran(), (tmp_path / "pool.log").read_text()
        # new code: another job, on a queue the pool did not serve
        module.write_text(HUP_APP.format(queue="other-queue", name="second"))
        for cached in tmp_path.glob("__pycache__/*"):
            cached.unlink()
        pool.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while b"second" not in ran() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"second" in ran(), (tmp_path / "pool.log").read_text()
        firsts = ran().count(b"first")
        time.sleep(2.5)
        assert ran().count(b"first") == firsts  # the old schedule is gone
        assert ran().count(b"second") >= 2
    finally:
        pool.send_signal(signal.SIGTERM)
        try:
            pool.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pool.kill()
            pool.wait()
