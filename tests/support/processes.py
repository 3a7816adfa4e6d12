"""``fastq`` run as a user runs it: its command line in a subprocess, from the
repository root (so ``--app tests.apps.<name>`` imports), with the test server's URL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def fastq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastq", *args]


def subprocess_env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, FASTQ_REDIS_URL=url, PYTHONPATH=str(ROOT), **extra)
    return env
