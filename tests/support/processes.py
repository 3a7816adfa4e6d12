"""``fastq`` run as a user runs it: its command line in a subprocess, from the
repository root (so ``--app tests.apps.<name>`` imports), with the test server's URL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def fastq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastq", *args]


def subprocess_env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, FASTQ_REDIS_URL=url, PYTHONPATH=str(ROOT), **extra)
    return env


def wait_while_working(
    url: str, wait_args: list[str], work: list[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``fastq wait`` with ``wait_args``, and ``work`` (a worker's command line) started
    only once the wait has read the queue and printed its first line, so that the
    drain it shows is the whole of it however fast the worker is. Returns the wait's
    result; asserts that the worker exited 0."""
    env = subprocess_env(url)
    waiting = subprocess.Popen(
        fastq_cmd("wait", *wait_args), env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert waiting.stdout is not None
        first = waiting.stdout.readline()  # printed (and flushed) after its first read
        worker = subprocess.Popen(work, env=env, stderr=subprocess.DEVNULL)
        try:
            rest, err = waiting.communicate(timeout=timeout)
        finally:
            assert worker.wait(timeout=timeout) == 0
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    return subprocess.CompletedProcess(waiting.args, waiting.returncode, first + rest, err)


def stop_process(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    """SIGTERM (if it still runs), then its exit status; killed if it outlives
    ``timeout_s``, and the timeout raised."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
