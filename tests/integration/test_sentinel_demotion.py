"""A master demoted under a worker on a ``redis+sentinel://`` URL: READONLY (and the
UNBLOCKED that cuts its idle BLPOP short) mean "reconnect and ask the sentinels
again", not a crash. The sentinels are stood in for by their answer (the master's
address), so that the demotion happens exactly when the test says: nothing kills
the clients of the old master, as a real Sentinel would right after."""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterator

import pytest
import redis
from redis.sentinel import Sentinel

import fastq
from fastq.protocol.introspect import queue_stats
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


def _wait(cond: object, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    a = RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]).start()
    b = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(a.port)]).start()
    try:
        yield a, b
    finally:
        b.cleanup()
        a.cleanup()


def _in_sync(replica: RedisServer) -> bool:
    client = redis.Redis(port=replica.port)
    try:
        return client.info("replication").get("master_link_status") == "up"
    finally:
        client.close()


def _blocked_clients(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.info("clients")["blocked_clients"])
    finally:
        client.close()


def _caught_up(master: RedisServer, replica: RedisServer) -> bool:
    """Has the replica applied every write the master took? (A link "up" is not
    enough: after a diskless sync the master streams to the replica only once its
    first REPLCONF ACK came, up to a second later.)"""
    m, r = redis.Redis(port=master.port), redis.Redis(port=replica.port)
    try:
        taken = int(m.info("replication")["master_repl_offset"])
        return int(r.info("replication").get("slave_repl_offset", -1)) >= taken
    finally:
        m.close()
        r.close()


def test_a_worker_reconnects_to_the_new_master_when_the_old_one_says_readonly(
    pair: tuple[RedisServer, RedisServer],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = pair
    _wait(lambda: _in_sync(b), "the replica")
    master = {"port": a.port}
    # what the sentinels would say: where the master is now
    monkeypatch.setattr(
        Sentinel, "discover_master", lambda self, name: ("127.0.0.1", master["port"])
    )
    app = fastq.App("redis+sentinel://127.0.0.1:1/mymaster/0", namespace=namespace)
    runs: list[int] = []

    @app.job(queue="q")
    def work(i: int) -> None:
        runs.append(i)

    work.enqueue_many([(i,) for i in range(50)])
    worker = Worker(app, ["q"], handle_signals=False, idle_timeout_s=1.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    caplog.set_level(logging.WARNING, logger="fastq")
    thread.start()
    try:
        _wait(lambda: len(runs) == 50, "the first 50 jobs")
        # the worker is idle, blocked in BLPOP on a (so its acks are written on a)...
        _wait(lambda: _blocked_clients(a) >= 1, "the worker's BLPOP on a")
        # ...and b has applied all of a's writes: a link "up" does not say so, and a
        # promotion before that loses the first 50 jobs' enqueue, claim and ack alike
        _wait(lambda: _caught_up(a, b), "the replica's offset")
        # the failover, as Sentinel does it, less its CLIENT KILL of a's clients
        redis.Redis(port=b.port).replicaof("NO", "ONE")
        redis.Redis(port=a.port).replicaof("127.0.0.1", b.port)
        master["port"] = b.port
        # the producer's connection to a meets READONLY too, and retries on b
        work.enqueue_many([(i,) for i in range(50, 100)])
        _wait(lambda: len(runs) == 100, "the 50 jobs enqueued after the demotion")
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert sorted(runs) == list(range(100))
    # read on b: an idle pooled connection may still be a's (Sentinel would have killed
    # it), and a read there sees a's copy, which may not have caught up with b yet
    b_client = redis.Redis(port=b.port)
    stats = queue_stats(b_client, app.keys("q"))
    b_client.close()
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (100, 0, 0)
    warnings = [r.getMessage() for r in caplog.records]
    assert any("Redis unavailable" in m for m in warnings), warnings
    assert any("Redis back after" in m for m in warnings), warnings
    app.close()
