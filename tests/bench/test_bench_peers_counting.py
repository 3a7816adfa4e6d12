"""The peer harness's count check: a peer that runs one job twice and never runs
another is reported with one duplicate and one loss, not as a correct run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest
import redis

from fastq.testing.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent.parent

# a "worker" that runs jobs 0..N-1 except job 3, and job 5 twice
SLOPPY_WORKER = """
import os, redis
r = redis.Redis.from_url(os.environ["PEERBENCH_URL"])
n = int(r.get("sloppy:n"))
for i in [j for j in range(n) if j != 3] + [5]:
    r.setbit("peerbench:seen", i, 1)
    r.incr("peerbench:count")
"""


@pytest.fixture
def harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_run", ROOT / "bench/peers/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers_run"] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url)
    c.delete("peerbench:count", "peerbench:seen", "sloppy:n")
    yield c
    c.delete("peerbench:count", "peerbench:seen", "sloppy:n")
    c.close()


def test_duplicate_and_loss_are_reported(
    harness: ModuleType, client: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    n = 50
    client.set("sloppy:n", n)
    peer = harness.Peer(
        "sloppy", [], "", lambda b: [[sys.executable, "-c", SLOPPY_WORKER]], "one process"
    )
    result = harness.drain(peer, client, redis_server.url, n, tmp_path)
    assert (result["runs"], result["distinct"]) == (n, n - 1)
    assert (result["duplicates"], result["lost"], result["ok"]) == (1, 1, False)


def test_runs_only_count_reports_the_surplus(
    harness: ModuleType, client: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Without an index (the memory workload) a surplus run still fails the check."""
    n = 20
    client.set("sloppy:n", n + 2)  # jobs 0..n+1 but 3, and 5 twice: n + 2 runs
    peer = harness.Peer(
        "sloppy", [], "", lambda b: [[sys.executable, "-c", SLOPPY_WORKER]], "one process"
    )
    result = harness.drain(peer, client, redis_server.url, n, tmp_path, indexed=False)
    assert (result["runs"], result["duplicates"], result["lost"]) == (n + 2, 2, 0)
    assert result["ok"] is False
