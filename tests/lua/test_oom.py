"""The scripts on a Redis over its maxmemory (noeviction): whatever frees memory or
only bookkeeps (ack, release, extend, reap, claim) still runs; enqueue is refused
whole, before it writes anything."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
import redis
from test_scripts import SENTINEL, claimed_ids, env

from fastq.protocol.contracts import ACK, CLAIM, ENQUEUE, EXTEND, REAP, RELEASE, ReleaseMode
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from fastq.testing.redis_server import RedisServer


@pytest.fixture(scope="module")
def small_server() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=["--maxmemory-policy", "noeviction"]).start()
    yield server
    server.cleanup()


@pytest.fixture
def full(small_server: RedisServer) -> Iterator[tuple[redis.Redis, QueueKeys]]:
    """A client and a queue on a server filled up to its maxmemory, with jobs
    a..d queued and w1 holding a and b."""
    client = redis.Redis.from_url(small_server.url)
    client.config_set("maxmemory", 0)
    client.flushall()
    k = QueueKeys(f"t{uuid.uuid4().hex[:12]}", "q")
    ids = ["a", "b", "c", "d"]
    ENQUEUE.call(client, ENQUEUE.keys_for(k), ENQUEUE.argv(0, 0, b"", ids, [env(i) for i in ids]))
    CLAIM.call(client, CLAIM.keys_for(k, "w1"), CLAIM.argv("w1", 2, 60_000, 100))
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 2 * 1024 * 1024)
    filler = b"x" * 64 * 1024
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for n in range(1000):
            client.set(f"{k.namespace}:filler:{n}", filler)
    # memory dips back once the refused write's buffers are freed, by how much
    # depends on the server's timers (Valkey frees a client's query buffer later, by
    # more than 256 KiB): stay far over, where being over is all that counts
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used // 2)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set(f"{k.namespace}:filler:last", b"x")
    yield client, k
    client.config_set("maxmemory", 0)
    client.flushall()
    client.close()


def test_enqueue_is_refused_whole(full: tuple[redis.Redis, QueueKeys]) -> None:
    r, k = full
    before = {key: r.dump(key) for key in r.scan_iter(match=f"{k.namespace}:{{q}}:*")}
    argv = ENQUEUE.argv(0, 0, b"", ["e"], [env("e")])
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        ENQUEUE.call(r, ENQUEUE.keys_for(k), argv)
    after = {key: r.dump(key) for key in r.scan_iter(match=f"{k.namespace}:{{q}}:*")}
    assert after == before


def test_extend_keeps_the_heartbeat_going(full: tuple[redis.Redis, QueueKeys]) -> None:
    r, k = full
    assert EXTEND.call(r, EXTEND.keys_for(k, "w1"), EXTEND.argv("w1", 120_000)) == 2


def test_ack_goes_through_even_when_all_stale(full: tuple[redis.Redis, QueueKeys]) -> None:
    r, k = full
    stale = Outcomes(done=[b"c", b"d"]).ack_argv(10**9, 1000)  # w1 does not hold them
    assert ACK.call(r, ACK.keys_for(k, "w1"), stale) == 0
    assert r.hget(k.stats, "stale_acks") == b"2"
    argv = Outcomes(done=[b"a"], retry=[(b"b", 1000, env("b"))], failed=1).ack_argv(10**9, 1000)
    assert ACK.call(r, ACK.keys_for(k, "w1"), argv) == 2
    assert r.smembers(k.held("w1")) == {SENTINEL}


def test_release_and_claim_go_through(full: tuple[redis.Redis, QueueKeys]) -> None:
    r, k = full
    argv = RELEASE.argv("w1", ReleaseMode.STALLED, 2)
    assert RELEASE.call(r, RELEASE.keys_for(k, "w1"), argv).moved == 2
    reply = CLAIM.call(r, CLAIM.keys_for(k, "w2"), CLAIM.argv("w2", 10, 60_000, 100))
    assert sorted(claimed_ids(reply)) == ["a", "b", "c", "d"]
    reaped = REAP.call(r, REAP.keys_for(k), REAP.argv(100, 10**9, 1000))
    assert reaped.expired_workers == []
