"""Periodic jobs go by Redis' clock: a pool whose processes' clocks run an hour
ahead of Redis', an hour behind it, or that is stepped back an hour while it runs,
fires every 1 s slot once and on time.

The pool runs under libfaketime (its wall clock moved, its monotonic clock left
alone, as NTP leaves it); the redis-server does not.
"""

from __future__ import annotations

import shutil
import signal
import statistics
import subprocess
from pathlib import Path

import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.periodic import check_each_slot_once, recorded_runs
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def _faketime_lib() -> Path:
    if FAKETIME_LIB.exists():
        return FAKETIME_LIB
    if shutil.which("dpkg"):
        listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True)
        for line in listed.stdout.splitlines():
            if line.endswith("/libfaketime.so.1"):
                return Path(line)
    pytest.skip("libfaketime is not installed (ci/setup.sh installs it)")


def _start_pool(
    url: str, namespace: str, log_path: Path, **faketime: str
) -> subprocess.Popen[bytes]:
    env = subprocess_env(
        url,
        LD_PRELOAD=str(_faketime_lib()),
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        **faketime,
    )
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            fastq_cmd(
                "--log-level",
                "INFO",
                "pool",
                "-c",
                "1",
                "--app",
                "tests.apps.clock_ticks",
                "--namespace",
                namespace,
            ),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _check_every_slot_once_on_time(runs: list[tuple[int, float]], log: str) -> None:
    check_each_slot_once([slot for slot, _ in runs], log)
    # on time by Redis' clock: not early (the script refuses that), and not an
    # hour (nor a second) late; the median bound leaves room for a loaded box
    lateness_ms = sorted(started - slot for slot, started in runs)
    assert lateness_ms[0] >= 0, lateness_ms
    assert statistics.median(lateness_ms) < 500, lateness_ms


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_a_pool_an_hour_off_redis_clock_fires_every_slot_once_on_time(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path, offset: str
) -> None:
    log_path = tmp_path / "pool.log"
    pool = _start_pool(redis_server.url, namespace, log_path, FAKETIME=offset)
    try:
        wait_until(lambda: len(recorded_runs(r, namespace)) >= 8, 60, "eight slots run")
    finally:
        _stop(pool)
    log = log_path.read_text(errors="replace")
    assert "this host's clock is 3600" in log, log  # said once, by the reaper
    _check_every_slot_once_on_time(recorded_runs(r, namespace), log)
    assert "Traceback" not in log, log


def test_a_pool_whose_clock_is_stepped_back_an_hour_fires_on(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "pool.log"
    offset_file = tmp_path / "faketime"
    offset_file.write_text("+0\n")
    pool = _start_pool(
        redis_server.url,
        namespace,
        log_path,
        FAKETIME_TIMESTAMP_FILE=str(offset_file),
        FAKETIME_CACHE_DURATION="1",  # the file is read again every second
    )
    try:
        wait_until(lambda: len(recorded_runs(r, namespace)) >= 4, 60, "four slots run")
        offset_file.write_text("-3600\n")  # the step: an hour back
        stepped_at = len(recorded_runs(r, namespace))
        wait_until(
            lambda: len(recorded_runs(r, namespace)) >= stepped_at + 6,
            60,
            "six slots after the step",
        )
    finally:
        _stop(pool)
    log = log_path.read_text(errors="replace")
    assert "this host's clock is 3600" in log, log  # the step was seen
    _check_every_slot_once_on_time(recorded_runs(r, namespace), log)
    assert "Traceback" not in log, log
