"""Shared fixtures: a throwaway redis-server per test session, a fresh namespace per test.

Never the Redis on 127.0.0.1:6379: every server here is started by the suite on
a free loopback port in a temp dir, and stopped by its process. Fixtures only: the
helpers the tests share are in ``tests/support/``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Iterator, Optional

import pytest
import redis

import fastq
from fastq.testing.cluster_server import ClusterServer
from fastq.testing.redis_server import RedisServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (a stable sort): run side by side with the rest by
    pytest-xdist, not alone at the end of the run, where a minute-long benchmark
    smoke started last held the whole run up."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def pool_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The pools the tests start keep their board files in a temp dir, not in
    /dev/shm: a test that kills a pool whole leaves them behind (on purpose: a pool
    started after it takes over), and a temp dir goes with the run."""
    before = os.environ.get("FASTQ_STATE_DIR")
    os.environ["FASTQ_STATE_DIR"] = str(tmp_path_factory.mktemp("pool-state"))
    yield
    if before is None:
        del os.environ["FASTQ_STATE_DIR"]
    else:
        os.environ["FASTQ_STATE_DIR"] = before


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


def _cluster(replicas: int, password: Optional[str] = None) -> Iterator[ClusterServer]:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed: it creates the Redis Cluster (redis-tools)")
    cluster = ClusterServer(3, replicas, password=password).start()
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterServer]:
    """A Redis Cluster of 3 masters (a few seconds to create: once per session)."""
    yield from _cluster(0)


@pytest.fixture(scope="session")
def redis_cluster_replicas() -> Iterator[ClusterServer]:
    """A Redis Cluster of 3 masters with a replica each and a password (``pw``):
    for failover tests."""
    yield from _cluster(1, password="pw")


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def app(redis_server: RedisServer, namespace: str) -> Iterator[fastq.App]:
    a = fastq.App(redis_server.url, namespace=namespace)
    yield a
    a.close()


@pytest.fixture
def capp(redis_cluster: ClusterServer, namespace: str) -> Iterator[fastq.App]:
    """An app on the session's Redis Cluster, in the test's namespace."""
    a = fastq.App(redis_cluster.url, namespace=namespace)
    yield a
    a.close()


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()
