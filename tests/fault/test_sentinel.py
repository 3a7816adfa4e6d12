"""``fastq pool`` on a ``redis+sentinel://`` URL while Sentinel fails the master over:
one master, one replica, three sentinels, the master killed with SIGKILL mid-drain.

Replication is asynchronous, so a write the old master acknowledged just before it
died may be lost by Redis itself: the jobs are enqueued, and the replica is waited
for (its replication offset), before the drain starts. Every one of them must then run at least
once (an ack the replica never got runs its job again: at least once, not exactly
once), no child is replaced, and the pool stops cleanly.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisSentinel, RedisServer
from tests.support.pool import Pool, noted_runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(120)]

SERVICE = "mymaster"


class Topology:
    """A master, its replica and three sentinels, each a process of its own."""

    def __init__(self) -> None:
        # no wait before a full sync: the replica is in step within a moment
        self.master = RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]).start()
        self.replica = RedisServer(
            extra_args=["--replicaof", "127.0.0.1", str(self.master.port)]
        ).start()
        self.sentinels = [
            RedisSentinel(self.master.port, service_name=SERVICE, down_after_ms=500).start()
            for _ in range(3)
        ]
        self.url = (
            "redis+sentinel://"
            + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
            + f"/{SERVICE}/0"
        )

    def ready(self) -> bool:
        """Every sentinel knows the replica and the two other sentinels (they find
        each other through the master's hello channel, every 2 s)."""
        for s in self.sentinels:
            client = redis.Redis(port=s.port, socket_timeout=1.0)
            try:
                state = client.sentinel_master(SERVICE)
            finally:
                client.close()
            if state["num-slaves"] < 1 or state["num-other-sentinels"] < 2:
                return False
        return True

    def replica_caught_up(self) -> bool:
        """The replica has applied every write the master has taken so far (WAIT
        would not do: it waits for this connection's own writes only)."""
        master = redis.Redis(port=self.master.port)
        replica = redis.Redis(port=self.replica.port)
        try:
            taken = int(master.info("replication")["master_repl_offset"])
            return int(replica.info("replication")["slave_repl_offset"]) >= taken
        finally:
            master.close()
            replica.close()

    def cleanup(self) -> None:
        for server in [*self.sentinels, self.replica, self.master]:
            server.cleanup()


@pytest.fixture
def topology() -> Iterator[Topology]:
    t = Topology()
    try:
        wait_until(t.ready, 20, "the sentinels to see the replica and each other")
        yield t
    finally:
        t.cleanup()


@pytest.fixture
def pool_on() -> Iterator[list[Pool]]:
    started: list[Pool] = []
    yield started
    for pool in started:
        pool.kill()
        for kid in psutil.Process().children(recursive=True):
            if kid.name().startswith("fastq-"):
                kid.kill()


def _stats(app: fastq.App) -> dict[str, int]:
    try:
        return app.stats("q")
    except fastq.RedisUnavailable:
        return {}


def test_a_master_failed_over_mid_drain_loses_no_job_and_restarts_no_child(
    topology: Topology, namespace: str, tmp_path: Path, pool_on: list[Pool]
) -> None:
    n = 8000
    app = fastq.App(topology.url, namespace=namespace)
    app.enqueue_many("note", [(i, 0.001) for i in range(n)], queue="q")
    # the replica has every job before the drain starts: what Redis kept, no more
    wait_until(topology.replica_caught_up, 10, "the replica to catch up")

    pool = Pool(topology.url, namespace, tmp_path / "pool.log", "-c", "4", "--batch", "20")
    pool_on.append(pool)
    before = {p.pid for p in pool.wait_children(4) + pool.wait_children(1, "reaper")}
    wait_until(lambda: sum(noted_runs(pool).values()) >= 1500, 30, "the drain well under way")

    assert topology.master.process is not None
    killed_at = time.monotonic()
    topology.master.kill()  # SIGKILL: no goodbye to anyone
    ran_at_kill = sum(noted_runs(pool).values())
    assert ran_at_kill < n, "the drain ended before the failover: make the jobs slower"
    sentinel = topology.sentinels[0]
    wait_until(lambda: sentinel.master_port_now() == topology.replica.port, 30, "the failover")
    failed_over_s = time.monotonic() - killed_at
    # the first acks to reach the new master: the workers found it
    processed_then = _stats(app).get("processed", 0)
    wait_until(
        lambda: _stats(app).get("processed", 0) > processed_then, 30, "an ack on the new master"
    )
    resumed_s = time.monotonic() - killed_at

    def drained() -> bool:
        stats = _stats(app)
        return set(noted_runs(pool)) == set(range(n)) and (
            stats.get("ready"),
            stats.get("inflight"),
            stats.get("scheduled"),
        ) == (0, 0, 0)

    wait_until(drained, 40, f"the drain after the failover:\n{pool.log()}")
    drained_s = time.monotonic() - killed_at
    after = {p.pid for p in pool.children() + pool.children("reaper")}
    assert pool.proc.poll() is None, pool.log()
    assert pool.stop() == 0, pool.log()
    log = pool.log()
    assert before == after, f"a child was replaced:\n{log}"
    assert "Traceback" not in log, log
    # each worker said once that Redis went, and once that it came back
    back = [
        line for line in log.splitlines() if "fastq.worker" in line and "Redis back after" in line
    ]
    assert len(back) >= 4, log
    ran = noted_runs(pool)
    assert set(ran) == set(range(n)), "a job was lost"
    twice = sum(1 for times in ran.values() if times > 1)
    new_master = redis.Redis(port=topology.replica.port)
    assert new_master.info("replication")["role"] == "master"
    new_master.close()
    app.close()
    print(
        f"\nsentinel failover: {n} jobs, {ran_at_kill} had run at the kill; sentinels named "
        f"the new master after {failed_over_s:.1f} s, the first ack reached it after "
        f"{resumed_s:.1f} s, drained after {drained_s:.1f} s; {twice} jobs ran twice "
        "(acks the replica never got)"
    )


def test_durable_enqueues_through_sentinel_survive_a_failover(
    topology: Topology, namespace: str
) -> None:
    """``App(min_replicas=1)`` on a Sentinel URL: every enqueue that returned is on the
    replica Sentinel promotes when the master is SIGKILLed mid-blast. With no replica
    left, enqueues raise ``NotReplicated`` (the jobs are on the new master, not
    confirmed); once the old master is back as its replica, the usual retry
    (``job_ids=exc.ids``) confirms them without adding any twice."""
    app = fastq.App(topology.url, namespace=namespace, min_replicas=1, replica_timeout_s=0.5)
    app.declare_queue("q")
    confirmed: list[str] = []
    unconfirmed: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                confirmed.extend(
                    app.enqueue_many("note", [(i + k, 0) for k in range(50)], queue="q")
                )
            except fastq.NotReplicated as exc:
                unconfirmed.extend(exc.ids)
                return
            except (fastq.RedisUnavailable, fastq.EnqueueError) as exc:
                failures.append(type(exc).__name__)  # the failover: not returned, so not counted
                time.sleep(0.05)
            i += 50

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_until(lambda: len(confirmed) >= 2000, 30, "a durable blast under way")
        topology.master.kill()  # SIGKILL mid-blast: whatever it had not passed on is gone
        sentinel = topology.sentinels[0]
        wait_until(lambda: sentinel.master_port_now() == topology.replica.port, 30, "the failover")
        producer.join(timeout=30)  # the new master has no replica: NotReplicated ends it
        assert not producer.is_alive()
    finally:
        stop.set()
        producer.join(timeout=30)
    new_master = redis.Redis(port=topology.replica.port)
    try:
        jobs_key = app.keys("q").jobs
        missing = [i for i in confirmed if not new_master.hexists(jobs_key, i)]
        assert missing == [], f"{len(missing)} of {len(confirmed)} confirmed jobs were lost"
        assert unconfirmed and all(new_master.hexists(jobs_key, i) for i in unconfirmed)
        # the old master comes back; Sentinel makes it the new master's replica
        topology.master.start()

        def a_replica_again() -> bool:
            replica = new_master.info("replication").get("slave0")
            return isinstance(replica, dict) and replica.get("state") == "online"

        wait_until(a_replica_again, 40, "the old master to rejoin as a replica")
        # retried as a user would: a replica just synced streams (and confirms) only
        # once its first ACK reached the master, up to a second later
        held = new_master.hlen(jobs_key)
        deadline = time.monotonic() + 20
        while True:
            try:
                ids = app.enqueue_many(
                    "note", [(0, 0)] * len(unconfirmed), queue="q", job_ids=unconfirmed
                )
                break
            except fastq.NotReplicated:
                assert time.monotonic() < deadline, "the rejoined replica never confirmed"
        assert ids == unconfirmed
        # nothing added twice (a call that failed mid-failover may have written its
        # jobs too: they were there before the retry, and are counted in ``held``)
        assert new_master.hlen(jobs_key) == held >= len(confirmed) + len(unconfirmed)
    finally:
        new_master.close()
        app.close()
    print(
        f"\ndurable enqueue through Sentinel: {len(confirmed)} confirmed before the "
        f"failover, none lost; {len(unconfirmed)} unconfirmed with no replica, confirmed "
        f"by the retry; {len(failures)} calls failed during the failover ({set(failures)})"
    )
