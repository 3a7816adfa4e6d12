"""Fixtures of the integration tests beyond tests/conftest.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from fastq.testing.redis_server import RedisServer
from tests.support.serve import Server, Servers


@pytest.fixture
def start(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Server]]:
    """Starts ``fastq serve`` subprocesses in the test's namespace; stops them all."""
    servers = Servers(redis_server.url, namespace, tmp_path)
    yield servers.start
    servers.stop_all()
