"""Workers on a real Redis Cluster of 3 masters: one worker serves queues whose slots
live on different masters (picked by the cluster's own ``CLUSTER SLOTS``), and every
feature its round trip carries works there: acks, retries, dead jobs, results,
scheduled jobs, the peek across queues, the idle wait on every master, per-key rate
limits, unique jobs, at-most-once jobs, the reaper's sweep, and a round trip that
meets a moved slot."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable, Iterator, cast

import pytest
import redis
from redis.cluster import RedisCluster

import fastq
from fastq.protocol.contracts import CLAIM
from fastq.reaper.reaper import Reaper
from fastq.testing.cluster_server import ClusterServer
from fastq.worker.roundtrip import RoundTrip
from fastq.worker.wire.cluster import SlotMoved
from tests.support.cluster import queues_on_each_master
from tests.support.workers import drain, drain_in_thread

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def owners(redis_cluster: ClusterServer, capp: fastq.App) -> dict[int, str]:
    """A queue on each master (port -> name), declared to the app."""
    found = queues_on_each_master(redis_cluster, "w")
    for queue in found.values():
        capp.declare_queue(queue)
    return found


@pytest.fixture
def nodes(redis_cluster: ClusterServer) -> Iterator[dict[int, redis.Redis]]:
    clients = {port: redis_cluster.client(port) for port in redis_cluster.ports}
    yield clients
    for client in clients.values():
        client.close()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_burst_worker_drains_queues_on_every_master(
    capp: fastq.App, owners: dict[int, str], nodes: dict[int, redis.Redis]
) -> None:
    runs: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()

    @capp.job(queue=owners[min(owners)], result_ttl_s=600)
    def square(queue: str, i: int) -> int:
        with lock:
            runs[(queue, i)] += 1
        return i * i

    @capp.job(queue=owners[min(owners)], retries=2, backoff_s=0.05, jitter=0.0)
    def flaky(queue: str, i: int) -> None:
        with lock:
            runs[(queue, -i)] += 1
            if runs[(queue, -i)] == 1:
                raise RuntimeError("the first attempt fails")

    @capp.job(queue=owners[min(owners)], retries=0)
    def doomed(queue: str) -> None:
        raise ValueError("never works")

    queues = list(owners.values())
    counts = {q: 700 + 13 * n for n, q in enumerate(queues)}
    ids = {}
    for q in queues:
        ids[q] = square.enqueue_many(queue=q, calls=[(q, i) for i in range(counts[q])])
        flaky.enqueue_many(queue=q, calls=[(q, i) for i in range(1, 6)])
        doomed.enqueue_with(queue=q)(q)
    drain(capp, queues, batch_size=50)
    for port, q in owners.items():
        assert all(runs[(q, i)] == 1 for i in range(counts[q]))
        assert all(runs[(q, -i)] == 2 for i in range(1, 6))  # one retry each
        stats = capp.stats(q)
        assert (stats["processed"], stats["failed"], stats["dead"]) == (counts[q] + 5, 6, 1)
        assert (stats["ready"], stats["inflight"], stats["scheduled"]) == (0, 0, 0)
        # the results were kept on the queue's own master, where result() finds them
        assert capp.result(ids[q][7], timeout_s=1) == 49
        assert nodes[port].exists(capp.keys(q).result(ids[q][counts[q] - 1])) == 1
        # each ended job's record, on its queue's master (logged by the acks, folded
        # by the reads): the retried ones took two runs
        done = capp.recent_jobs(q, "done", limit=10_000)
        assert len(done) == counts[q] + 5 and sorted({j.attempts for j in done}) == [1, 2]
    assert sum(runs.values()) == sum(counts.values()) + 3 * 10


def test_scheduled_jobs_on_every_master_are_promoted_when_due(
    capp: fastq.App, owners: dict[int, str]
) -> None:
    ran: dict[str, float] = {}

    @capp.job(queue=owners[min(owners)])
    def later(queue: str) -> None:
        ran[queue] = time.time()

    enqueued_at = time.time()
    for n, q in enumerate(owners.values()):
        later.enqueue_with(queue=q, delay_s=0.2 + 0.1 * n)(q)
    drain(capp, list(owners.values()), burst_horizon_s=3.0)
    assert set(ran) == set(owners.values())
    for n, q in enumerate(owners.values()):
        assert ran[q] >= enqueued_at + 0.2 + 0.1 * n - 0.005  # not before it was due
        assert capp.stats(q)["processed"] == 1


def test_queues_on_different_masters_are_taken_in_the_order_given(
    capp: fastq.App, owners: dict[int, str]
) -> None:
    """Strict priority across masters: the worker's peek at an earlier queue reads
    that queue's own master (its TIME included, for a scheduled job come due)."""
    order: list[str] = []
    high, mid, low = owners.values()

    @capp.job(queue=high)
    def record(tag: str, sleep_s: float = 0.0) -> None:
        order.append(tag)
        if tag == f"{low}-2":  # work arrives in earlier queues while `low` drains
            record.enqueue_with(queue=high)("urgent")
            record.enqueue_with(queue=mid, delay_s=0.05)("due-soon")
        time.sleep(sleep_s)

    for q in (low, mid, high):
        record.enqueue_many(queue=q, calls=[(f"{q}-{i}",) for i in range(3)])
    record.enqueue_many(queue=low, calls=[(f"{low}-{i}", 0.02) for i in range(3, 30)])
    drain(capp, [high, mid, low], batch_size=2)
    assert order[:9] == [f"{q}-{i}" for q in (high, mid, low) for i in range(3)]
    # each found by a peek within a few batches, long before `low` drained
    assert order.index("urgent") < order.index(f"{low}-10")
    assert order.index("urgent") < order.index("due-soon") < order.index(f"{low}-20")
    assert sorted(order) == sorted(
        ["urgent", "due-soon", *(f"{q}-{i}" for q in (high, mid) for i in range(3))]
        + [f"{low}-{i}" for i in range(30)]
    )


def blocked_clients(node: redis.Redis) -> int:
    return int(node.info("clients")["blocked_clients"])


def test_an_idle_worker_wakes_at_once_on_each_master_and_leaves_no_wait_behind(
    capp: fastq.App, owners: dict[int, str], nodes: dict[int, redis.Redis]
) -> None:
    ran_at: dict[str, float] = {}
    go_on = threading.Event()

    @capp.job(queue=owners[min(owners)])
    def ping(queue: str) -> None:
        ran_at[queue] = time.monotonic()
        go_on.wait(10)

    # a 30 s idle wait: only a wake-up token can make a job run promptly
    worker, thread = drain_in_thread(capp, list(owners.values()), burst=False, idle_timeout_s=30)
    try:
        for q in owners.values():
            go_on.clear()
            # idle: one BLPOP pending on every master
            wait_for(lambda: all(blocked_clients(n) == 1 for n in nodes.values()), 5, "BLPOPs")
            enqueued_at = time.monotonic()
            ping.enqueue_with(queue=q)(q)
            wait_for(lambda q=q: q in ran_at, 5, f"the job on {q}")
            assert ran_at[q] - enqueued_at < 0.5
            # while it runs, no BLPOP is left on the other masters to take a token unseen
            wait_for(lambda: sum(blocked_clients(n) for n in nodes.values()) == 0, 2, "no BLPOP")
            go_on.set()
        wait_for(
            lambda: [capp.stats(q)["processed"] for q in owners.values()] == [1] * 3, 5, "acks"
        )
    finally:
        go_on.set()
        worker.stop()
        ping.enqueue_with(queue=owners[min(owners)])("stop")  # wakes it to see the stop
        thread.join(10)
    assert not thread.is_alive()


def test_per_key_rate_limits_unique_and_at_most_once_jobs_on_every_master(
    capp: fastq.App, owners: dict[int, str]
) -> None:
    ran: Counter[tuple[str, str]] = Counter()
    first = owners[min(owners)]

    @capp.job(queue=first, rate_key="smtp:{account}", rate=1, per_s=3600, burst=2)
    def send(account: str, i: int) -> None:
        ran[("send", f"{account}{i}")] += 1

    @capp.job(queue=first, unique_for_s=600)
    def report(day: str) -> None:
        ran[("report", day)] += 1

    @capp.job(queue=first, delivery="at_most_once")
    def once(i: int) -> None:
        ran[("once", str(i))] += 1

    for q in owners.values():
        send.enqueue_many(queue=q, calls=[("a", i) for i in range(3)])
        day = report.enqueue_with(queue=q)(q)
        assert report.enqueue_with(queue=q)(q) == day  # the lock holds on its master
        once.enqueue_many(queue=q, calls=[(i,) for i in range(4)])
    drain(capp, list(owners.values()), burst_horizon_s=0.3)
    # the key's burst of 2 per queue (a rate key is per queue); the third waits an hour
    assert ran == Counter(
        {
            ("send", "a0"): 3,
            ("send", "a1"): 3,
            **{("report", q): 1 for q in owners.values()},
            **{("once", str(i)): 3 for i in range(4)},
        }
    )
    for q in owners.values():
        stats = capp.stats(q)
        assert (stats["scheduled"], stats["retried"], stats["processed"]) == (1, 1, 7)
        assert report.enqueue_with(queue=q)(q) != day  # the end of the job freed the lock


def test_the_reaper_takes_back_expired_leases_on_every_master(
    capp: fastq.App, owners: dict[int, str]
) -> None:
    for q in owners.values():
        capp.enqueue_many("job", [(i,) for i in range(3)], queue=q)
        keys = CLAIM.keys_for(capp.keys(q), "gone")
        assert len(CLAIM.call(capp.redis, keys, CLAIM.argv("gone", 10, 50, 100))) == 3
    time.sleep(0.1)  # the 50 ms leases lapse
    reaper = Reaper(capp, list(owners.values()), handle_signals=False)
    client = capp.new_client(retries=0)
    try:
        reaper.sweep(client)
    finally:
        client.close()
    for q in owners.values():
        stats = capp.stats(q)
        assert (stats["ready"], stats["inflight"], stats["stalled"]) == (3, 0, 3)


def test_a_round_trip_answered_moved_reads_the_slot_map_again(
    capp: fastq.App, owners: dict[int, str]
) -> None:
    """A node that no longer serves a slot answers MOVED: the round trip fails as
    a lost one (the worker sends it again after a backoff) and the next one goes
    where the refreshed slot map says."""
    queue = owners[min(owners)]
    job_id = capp.enqueue("job", (1,), queue=queue)
    rt = RoundTrip(
        lambda: capp.new_client(retries=0),
        "w1",
        [queue],
        capp.namespace,
        cluster=True,
        lease_ms=60_000,
        dead_max_age_ms=60_000,
        dead_max_len=100,
        max_stalls=1,
    )
    try:
        client = cast(RedisCluster, rt.client)
        slot = client.keyslot(capp.keys(queue).ready)
        slots = client.nodes_manager.slots_cache
        wrong = next(n for n in client.get_primaries() if n.name != slots[slot][0].name)
        slots[slot] = [wrong]  # as if the slot had moved since the map was read
        with pytest.raises(SlotMoved):
            rt.request({}, [queue], 10).result()
        [claim] = rt.request({}, [queue], 10).result()
        assert claim.reply.ids == [job_id.encode()]
    finally:
        rt.close()
