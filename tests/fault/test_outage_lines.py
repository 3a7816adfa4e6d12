"""One log line per Redis outage, each way, in every process: a Redis restarted
under a running pool (its master, workers and reaper) and a standalone reaper."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, noted_runs, wait_until
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]

_LINE = re.compile(r"(?P<who>[\w ()\-:.]+?): Redis (?P<what>unavailable|back after)")


def outage_lines(log: str) -> dict[str, Counter[str]]:
    """Per process part ("reaper", "worker <id>", ...): its outage lines by kind."""
    out: dict[str, Counter[str]] = {}
    for line in log.splitlines():
        m = _LINE.search(line.split(": ", 1)[-1])
        if m:
            out.setdefault(m["who"], Counter())[m["what"]] += 1
    return out


def test_a_redis_restart_is_one_line_each_way_in_every_process(
    app: fastq.App, pools: Callable[..., Pool], redis_server: RedisServer, tmp_path: Path
) -> None:
    pool = pools("-c", "2", "--batch", "10")
    pool.wait_children(2)
    pool.wait_children(1, "reaper")
    reaper_log = tmp_path / "reaper.log"
    with open(reaper_log, "wb") as out:
        reaper = subprocess.Popen(
            fastq_cmd(
                "reaper",
                "--interval",
                "0.1",
                "--app",
                "tests.apps.pool_jobs",
                "--namespace",
                app.namespace,
            ),
            env=subprocess_env(redis_server.url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        app.enqueue_many("note", [(i, 0.01) for i in range(100)], queue="q")
        app.enqueue("note", (1000,), queue="q", delay_s=30)  # a due time the reapers watch
        wait_until(lambda: len(noted_runs(pool)) >= 100, 30, "the first drain")
        wait_until(lambda: "sweeping" in reaper_log.read_text(), 30, "the reaper's start")
        redis_server.kill()
        time.sleep(3)  # every process meets the outage, and retries many times
        redis_server.start()
        app.close()
        app.enqueue_many("note", [(i, 0.01) for i in range(100, 200)], queue="q")
        wait_until(lambda: len(noted_runs(pool)) >= 200, 30, "the drain after the restart")

        def told() -> dict[str, Counter[str]]:
            # the pool's processes, and the standalone reaper apart (both are "reaper")
            pooled = outage_lines(pool.log())
            alone = outage_lines(reaper_log.read_text())
            return {**pooled, **{f"standalone {who}": c for who, c in alone.items()}}

        # each process that met the outage says it is over once it has called Redis
        wait_until(lambda: all(c["back after"] for c in told().values()), 30, "every 'back' line")
        time.sleep(2)  # and says no more
    finally:
        reaper.send_signal(signal.SIGTERM)
        reaper.wait(timeout=30)
    assert pool.stop() == 0, pool.log()
    logs = pool.log() + reaper_log.read_text()
    lines = told()
    # the pool's workers, its reaper and the standalone one all met it
    assert sum(1 for who in lines if who.startswith("worker")) >= 2, logs
    assert "reaper" in lines and "standalone reaper" in lines, logs
    for who, counts in lines.items():
        assert counts == Counter({"unavailable": 1, "back after": 1}), f"{who}: {counts}\n{logs}"
    assert "Traceback" not in logs, logs
