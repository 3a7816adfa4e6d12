"""One place classifies what Redis says; each class has one policy."""

from __future__ import annotations

import logging

import pytest
from redis import exceptions as rex
from redis.sentinel import MasterNotFoundError

from fastq import RedisRefused, RedisUnavailable
from fastq.connection.faults import Fault, Outage, backoff_s, classify, for_producer
from fastq.worker.wire.cluster import SlotMoved


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (
            rex.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
            Fault.UNAVAILABLE,
        ),
        (rex.TimeoutError("Timeout reading from socket"), Fault.UNAVAILABLE),
        (rex.BusyLoadingError("Redis is loading the dataset in memory"), Fault.UNAVAILABLE),
        (rex.ReadOnlyError("You can't write against a read only replica."), Fault.UNAVAILABLE),
        (rex.MasterDownError("Link with MASTER is down"), Fault.UNAVAILABLE),
        (rex.ClusterDownError("The cluster is down"), Fault.UNAVAILABLE),
        (RedisUnavailable("cannot reach Redis"), Fault.UNAVAILABLE),
        (
            rex.ResponseError(
                "UNBLOCKED force unblock from blocking operation, instance state changed "
                "(master -> replica?)"
            ),
            Fault.UNAVAILABLE,
        ),
        (MasterNotFoundError("No master found for 'mymaster'"), Fault.UNAVAILABLE),
        (ConnectionResetError(104, "Connection reset by peer"), Fault.UNAVAILABLE),
        (
            rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
            Fault.OUT_OF_MEMORY,
        ),
        (
            rex.ResponseError("OOM command not allowed when used memory > 'maxmemory'. script: x"),
            Fault.OUT_OF_MEMORY,
        ),
        (rex.ResponseError("BUSY Redis is busy running a script."), Fault.BUSY),
        (rex.NoScriptError("No matching script."), Fault.NO_SCRIPT),
        (rex.AuthenticationError("invalid username-password pair"), Fault.DENIED),
        (
            rex.NoPermissionError("this user has no permissions to run the 'evalsha' command"),
            Fault.DENIED,
        ),
        (rex.ResponseError("NOAUTH Authentication required."), Fault.DENIED),
        # SELECT at connect, for a /db beyond the server's `databases`
        (rex.ResponseError("DB index is out of range"), Fault.NO_DATABASE),
        # a cluster failing over: the slot map is being rewritten
        (SlotMoved("the slot map changed: 1234 127.0.0.1:7001"), Fault.UNAVAILABLE),
        # a slot migrating: redis-py's client met TRYAGAIN until its TTL ran out
        (rex.ClusterError("TTL exhausted."), Fault.UNAVAILABLE),
        (rex.SlotNotCoveredError('Slot "1234" is not covered by the cluster.'), Fault.UNAVAILABLE),
        (
            rex.RedisClusterException(
                "Redis Cluster cannot be connected. Please provide at least one reachable node: "
                "Error 111 connecting to 127.0.0.1:7000. Connection refused."
            ),
            Fault.UNAVAILABLE,
        ),
        (
            rex.RedisClusterException(
                "All slots are not covered after query all startup_nodes. 10923 of 16384 covered..."
            ),
            Fault.UNAVAILABLE,
        ),
    ],
)
def test_each_reply_has_its_class(exc: BaseException, fault: Fault) -> None:
    assert classify(exc) is fault


@pytest.mark.parametrize(
    "exc",
    [
        rex.ResponseError("ERR Error running script: claim: n must be a positive integer"),
        rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ValueError("not Redis at all"),
        # a plain client of one cluster node: a wrong URL, not a failover
        rex.MovedError("1234 127.0.0.1:7001"),
        rex.ClusterCrossSlotError("Keys in request don't hash to the same slot"),
        rex.RedisClusterException("No way to dispatch this command to Redis Cluster."),
    ],
)
def test_a_bug_is_not_a_fault(exc: BaseException) -> None:
    assert classify(exc) is None


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    first = [backoff_s(1, Fault.UNAVAILABLE) for _ in range(200)]
    assert all(0.05 <= d <= 0.1 for d in first) and len(set(first)) > 100
    assert all(2.5 <= backoff_s(30, Fault.UNAVAILABLE) <= 5.0 for _ in range(100))
    # a wrong password is not fixed by retrying: slow from the first try
    assert all(2.5 <= backoff_s(1, Fault.DENIED) <= 5.0 for _ in range(100))


def test_producers_get_fastq_errors() -> None:
    url = "redis://127.0.0.1:1/0"
    down = for_producer(rex.ConnectionError("refused"), url)
    assert isinstance(down, RedisUnavailable) and isinstance(down, ConnectionError)
    full = for_producer(rex.OutOfMemoryError("command not allowed"), url)
    assert isinstance(full, RedisRefused) and full.fault == "out of memory"
    assert "127.0.0.1:1" in str(full)
    bug = rex.ResponseError("ERR wrong number of arguments")
    assert for_producer(bug, url) is bug


def test_an_outage_is_logged_when_it_starts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("worker w1", logging.getLogger("test.outage"))
    outage.recovered()  # nothing was wrong: nothing said
    with caplog.at_level(logging.INFO, logger="test.outage"):
        for _ in range(10):
            outage.failed(rex.ConnectionError("refused"))
        outage.failed(rex.OutOfMemoryError("command not allowed"))  # a new kind: said once
        outage.failed(rex.OutOfMemoryError("command not allowed"))
        outage.recovered()
        outage.recovered()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "Redis unavailable" in lines[0] and "Redis out of memory" in lines[1]
    assert lines[2].startswith("worker w1: Redis back after") and "12 failed tries" in lines[2]
    assert not outage.ongoing


def test_an_outage_raises_what_is_not_a_fault() -> None:
    outage = Outage("reaper", logging.getLogger("test.outage"))
    with pytest.raises(rex.ResponseError, match="WRONGTYPE"):
        outage.failed(rex.ResponseError("WRONGTYPE Operation against a key"))
