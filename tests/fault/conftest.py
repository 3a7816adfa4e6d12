"""Fixtures of the fault tests: each test gets a durable server of its own (in place
of the session's shared one) and the pools it starts are killed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest

from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """Each test here gets a server of its own, with every write fsynced (so a
    kill -9 loses nothing), in place of the session's shared one; the ``app``,
    ``r`` and ``namespace`` fixtures of tests/conftest.py use it."""
    s = RedisServer(appendonly=True).start()
    yield s
    s.cleanup()


@pytest.fixture
def pools(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Pool]]:
    started: list[Pool] = []

    def start(*args: str) -> Pool:
        pool = Pool(redis_server.url, namespace, tmp_path / "pool.log", *args)
        started.append(pool)
        return pool

    yield start
    for pool in started:
        pool.kill()
        for kid in psutil.Process().children(recursive=True):
            if kid.name().startswith("fastq-"):
                kid.kill()
