"""``--log-level`` and ``--log-format json``: one line per event, per-job lines at DEBUG."""

from __future__ import annotations

import json
import subprocess

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import fastq_cmd, subprocess_env


def _worker(url: str, app: fastq.App, *log_options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        fastq_cmd(
            *log_options,
            "worker",
            "--app",
            "tests.apps.counting",
            "--namespace",
            app.namespace,
            "-q",
            "count",
            "--burst",
        ),
        env=subprocess_env(url),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_lines_with_one_debug_line_per_job(redis_server: RedisServer, app: fastq.App) -> None:
    ids = app.enqueue_many("count", [(i,) for i in range(5)], queue="count")
    proc = _worker(redis_server.url, app, "--log-format", "json", "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    jobs = [line for line in lines if line["logger"] == "fastq.jobs"]
    assert sorted(line["job_id"] for line in jobs) == sorted(ids)
    assert {(line["level"], line["queue"], line["job"]) for line in jobs} == {
        ("DEBUG", "count", "count")
    }
    assert all(" done in " in line["message"] for line in jobs)
    assert all(line.get("worker") for line in lines if line["logger"] == "fastq.worker")


def test_no_per_job_lines_at_info(redis_server: RedisServer, app: fastq.App) -> None:
    app.enqueue_many("count", [(i,) for i in range(5)], queue="count")
    proc = _worker(redis_server.url, app, "--log-level", "INFO")
    assert proc.returncode == 0, proc.stderr
    assert "fastq.jobs" not in proc.stderr and "stopped after 5 jobs" in proc.stderr


def test_bad_log_options_are_one_line_errors(redis_server: RedisServer, app: fastq.App) -> None:
    proc = _worker(redis_server.url, app, "--log-level", "LOUD")
    assert proc.returncode != 0
    assert proc.stderr.strip() == (
        "fastq: error: unknown log level 'LOUD' (DEBUG, INFO, WARNING or ERROR)"
    )
    proc = _worker(redis_server.url, app, "--log-format", "xml")
    assert proc.returncode != 0 and "invalid choice: 'xml'" in proc.stderr
