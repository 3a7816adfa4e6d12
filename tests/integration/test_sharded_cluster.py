"""A sharded queue's producer and operator side on a real Redis Cluster of 3 masters:
its shards are slots of their own, a blast is sent to each shard's master in one
round trip, and the operator's methods see the one queue. (Workers on a cluster
come with the cluster workers.)"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from redis.cluster import key_slot

import fastq
from fastq.protocol.keys import shard_names
from fastq.testing.cluster_server import ClusterServer
from tests.support.workers import drain, drain_in_thread

pytestmark = pytest.mark.timeout(60)

SHARDS = 8


def test_a_sharded_queue_spreads_over_the_masters_and_is_seen_as_one(
    redis_cluster: ClusterServer, capp: fastq.App
) -> None:
    names = shard_names("mailer", SHARDS)
    node = redis_cluster.client(redis_cluster.ports[0])
    try:
        ranges = node.execute_command("CLUSTER", "SLOTS")
    finally:
        node.close()
    slots = {name: key_slot(f"{{{name}}}".encode()) for name in names}
    owner = {
        name: next(int(r[2][1]) for r in ranges if int(r[0]) <= slots[name] <= int(r[1]))
        for name in names
    }
    assert len(set(owner.values())) == 3  # eight shards, every master holds some
    capp.declare_queue("mailer", shards=SHARDS)
    ids = capp.enqueue_many("send", [(i,) for i in range(SHARDS * 1000)], queue="mailer")
    ids += [capp.enqueue("send", (i,), queue="mailer", job_id=f"order-{i}") for i in range(20)]
    for name in names:
        port = owner[name]
        client = redis_cluster.client(port)
        try:
            assert client.llen(capp.keys(name).ready) >= 1000  # on its own master
        finally:
            client.close()
    stats = capp.stats("mailer")
    assert (stats["ready"], stats["shards"]) == (SHARDS * 1000 + 20, SHARDS)
    assert capp.queues() == ["mailer"]
    capp.pause("mailer")
    assert capp.stats("mailer")["paused"] == 1
    capp.resume("mailer")
    capp.set_rate_limit("mailer", 80, per_s=1, burst=16)  # the whole queue's, on every shard
    for name in names:
        client = redis_cluster.client(owner[name])
        try:
            settings = client.hmget(capp.keys(name).settings, ["rate", "rate_shards"])
            assert settings == [b"80", str(SHARDS).encode()], name
        finally:
            client.close()
    assert str(capp.rate_limit("mailer")) == "80/s (burst 16)"
    info = capp.get_job("order-7")
    assert info is not None and info.queue == "mailer"
    assert capp.cancel(ids[-1]) and capp.stats("mailer")["cancelled"] == 1
    assert Counter(capp.physical_queues()) == Counter(names)
    assert capp.purge("mailer") == SHARDS * 1000 + 19  # not the cancelled one, still listed


def test_a_durable_blast_on_a_sharded_queue_waits_on_each_shards_master(
    redis_cluster_replicas: ClusterServer,
) -> None:
    """With min_replicas, each shard's chunks go to its master with a WAIT on the
    same connection: every shard's replica holds its jobs when the call returns."""
    from test_durable_enqueue import replica_of

    cluster = redis_cluster_replicas
    app = fastq.App(
        cluster.url, namespace=f"t{uuid.uuid4().hex[:12]}", min_replicas=1, replica_timeout_s=5
    )
    app.declare_queue("mailer", shards=4)
    try:
        ids = app.enqueue_many("send", [(i,) for i in range(4000)], queue="mailer")
        for name in shard_names("mailer", 4):
            replica = cluster.client(replica_of(cluster, name).port)
            try:
                replica.execute_command("READONLY")
                assert replica.llen(app.keys(name).ready) == 1000
            finally:
                replica.close()
        assert app.stats("mailer")["ready"] == len(ids) == 4000
    finally:
        app.close()


def test_a_worker_drains_a_sharded_queue_over_every_master(
    redis_cluster: ClusterServer, capp: fastq.App
) -> None:
    """One worker serves the eight shards on three masters: every job once, every
    shard served; a job due later in any shard is waited for; idle, it wakes for a
    job enqueued in any shard."""

    runs: Counter[int] = Counter()

    @capp.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        runs[i] += 1

    send.enqueue_many([(i,) for i in range(SHARDS * 1000)])
    send.enqueue_with(delay_s=0.3, job_id="later")(-1)
    drain(capp, ["mailer"], burst_horizon_s=2.0)
    assert runs == Counter(range(-1, SHARDS * 1000))
    for name in shard_names("mailer", SHARDS):
        processed = int(capp.redis.hget(capp.keys(name).stats, "processed") or 0)
        assert processed >= 1000
    worker, thread = drain_in_thread(capp, ["mailer"], burst=False, idle_timeout_s=5.0)
    try:
        time.sleep(0.3)  # idle, blocked on every shard's wake-up list
        t0 = time.monotonic()
        for i in range(SHARDS):
            send.enqueue(100_000 + i)  # a shard each in turn
        # woken by the enqueues, not at its idle timeout (5 s): well before that,
        # however slow the machine
        deadline = t0 + 4.0
        while sum(runs.values()) < SHARDS * 1000 + 1 + SHARDS:
            assert time.monotonic() < deadline, "an idle worker missed a wake-up"
            time.sleep(0.005)
    finally:
        worker.stop()
        thread.join(10)
