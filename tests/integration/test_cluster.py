"""The producer and the operator side on a real Redis Cluster of 3 masters.

Queues are picked so that their slots land on different masters (by ``key_slot``
and the cluster's own ``CLUSTER SLOTS``, not by the client under test), and what
each call wrote is read back from the node that must hold it.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from typing import Iterator

import orjson
import pytest
import redis
from redis.exceptions import MovedError

import fastq
from fastq.errors import RedisRefused, ResultTimeout
from fastq.protocol import scripts
from fastq.protocol.contracts import CLAIM
from fastq.protocol.results import store_commands
from fastq.testing.cluster_server import ClusterServer
from tests.support.cluster import port_of, queues_on_each_master
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = pytest.mark.timeout(60)

SENTINEL = "fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"


def getkeys_calls(nodes: dict[int, redis.Redis]) -> int:
    """``COMMAND GETKEYS`` calls served by the masters (redis-py's way to find the
    keys of a command it cannot parse, such as an EVALSHA in a cluster pipeline)."""
    stats = [node.info("commandstats").get("cmdstat_command|getkeys") for node in nodes.values()]
    return sum(s["calls"] for s in stats if s)


@pytest.fixture
def nodes(redis_cluster: ClusterServer) -> Iterator[dict[int, redis.Redis]]:
    """A plain client of each master, by port."""
    clients = {port: redis_cluster.client(port) for port in redis_cluster.ports}
    yield clients
    for client in clients.values():
        client.close()


def test_enqueues_land_on_the_master_of_each_queue(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    owners = queues_on_each_master(redis_cluster, "mail")
    assert type(capp.redis).__name__ == "RedisCluster"
    getkeys_before = getkeys_calls(nodes)
    counts = {}
    for n, (_, queue) in enumerate(sorted(owners.items())):
        # 2,500 jobs: three chunks of one blast, then one job alone
        counts[queue] = 2500 + n * 7
        ids = capp.enqueue_many("send", [(i,) for i in range(counts[queue] - 1)], queue=queue)
        ids.append(capp.enqueue("send", ("last",), queue=queue, priority=5))
        assert len(set(ids)) == counts[queue]
    # each EVALSHA went to its node as it was: no node was asked for its keys first
    assert getkeys_calls(nodes) == getkeys_before
    for port, queue in owners.items():
        stats = capp.stats(queue)
        assert (stats["ready"], stats["enqueued"]) == (counts[queue], counts[queue])
        # the jobs are on the master that owns the queue's slot, and only there
        jobs_key = capp.keys(queue).jobs
        assert nodes[port].hlen(jobs_key) == counts[queue]
        for other in set(nodes) - {port}:
            with pytest.raises(MovedError):
                nodes[other].hlen(jobs_key)
    assert capp.queues() == sorted(owners.values())


def test_one_pipelined_round_trip_carries_calls_for_every_master(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    """scripts.call_many with calls of three queues on three masters: each goes to
    its master, none is answered MOVED or CROSSSLOT."""
    owners = queues_on_each_master(redis_cluster, "mixed")
    ids = [capp.enqueue("job", (q,), queue=q) for q in owners.values()]
    commands = []
    for queue in owners.values():
        keys = CLAIM.keys_for(capp.keys(queue), "w1")
        commands.append(CLAIM.command(keys, CLAIM.argv("w1", 10, 30_000, 100)))
    replies = scripts.call_many(capp.redis, commands)
    assert [CLAIM.parse(r).ids for r in replies] == [[i.encode()] for i in ids]
    for (port, queue), job_id in zip(owners.items(), ids):  # each held where claimed
        assert nodes[port].sismember(capp.keys(queue).held("w1"), job_id) == 1


def test_scripts_are_on_every_master_and_a_flushed_one_is_reloaded(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    capp.redis  # noqa: B018 - the client loads the scripts as it is made
    shas = [s.sha for s in scripts.loaded()]
    for node in nodes.values():
        assert node.script_exists(*shas) == [True] * len(shas)
    owners = queues_on_each_master(redis_cluster, "flushed")
    port = min(owners)
    nodes[port].script_flush()
    ids = capp.enqueue_many("f", [(i,) for i in range(1500)], queue=owners[port])
    assert len(ids) == 1500 and capp.stats(owners[port])["ready"] == 1500
    assert nodes[port].script_exists(*shas) == [True] * len(shas)
    nodes[port].script_flush()  # a single call reloads too
    assert capp.cancel(ids[0], queue=owners[port]) == fastq.Cancelled(stopped=1)


def test_get_job_cancel_and_tags_search_queues_on_every_master(
    redis_cluster: ClusterServer, capp: fastq.App
) -> None:
    owners = list(queues_on_each_master(redis_cluster, "find").values())
    ids = {
        q: capp.enqueue_many("job", [(q, i) for i in range(3)], queue=q, tags=["batch7"])
        for q in owners
    }
    late = capp.enqueue("job", ("late",), queue=owners[2], delay_s=600)
    # without a queue, every known queue is searched
    info = capp.get_job(ids[owners[1]][2])
    assert info is not None
    assert (info.queue, info.state, info.args) == (owners[1], "queued", [owners[1], 2])
    late_info = capp.get_job(late)
    assert late_info is not None and (late_info.queue, late_info.state) == (owners[2], "scheduled")
    page = capp.jobs_by_tag("batch7", count=4)
    assert [(j.queue, j.state) for j in page.jobs] == [(owners[0], "queued")] * 3 + [
        (owners[1], "queued")
    ]
    rest = capp.jobs_by_tag("batch7", cursor=page.cursor, count=100)
    assert len(rest.jobs) == 5 and rest.cursor is None
    assert capp.cancel(ids[owners[2]][0]) == fastq.Cancelled(stopped=1)
    assert capp.cancel(ids[owners[2]][0]) == fastq.Cancelled()
    assert capp.cancel_by_tag("batch7") == fastq.Cancelled(stopped=8)
    assert [capp.stats(q)["cancelled"] for q in owners] == [3, 3, 3]
    assert capp.get_job(ids[owners[0]][1]).state == "cancelled"  # type: ignore[union-attr]
    assert capp.jobs_by_tag("batch7").jobs == []


def test_pause_resume_rate_limit_and_purge_on_each_master(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    owners = queues_on_each_master(redis_cluster, "flow")
    for n, queue in enumerate(owners.values()):
        capp.enqueue_many("job", [(i,) for i in range(10 + n)], queue=queue)
        capp.enqueue_many("job", [(i,) for i in range(4)], queue=queue, delay_s=600)
    for port, queue in owners.items():
        capp.pause(queue)
        assert capp.stats(queue)["paused"] == 1
        assert nodes[port].hget(capp.keys(queue).settings, "paused") == b"1"
        capp.resume(queue)  # in one MULTI on the queue's master
        assert capp.stats(queue)["paused"] == 0
        assert nodes[port].lrange(capp.keys(queue).wake, 0, -1) == [b"1"]
        capp.set_rate_limit(queue, 50, per_s=2.0, burst=3)
        limit = capp.rate_limit(queue)
        assert limit is not None and (limit.rate, limit.period_ms, limit.burst) == (50, 2000, 3)
    counts = [capp.purge(q) for q in owners.values()]
    assert counts == [14, 15, 16]
    assert all(capp.stats(q)["ready"] == capp.stats(q)["scheduled"] == 0 for q in owners.values())


def test_holders_and_results_across_masters(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    """A claim made as a worker's would be: who holds what, and ``result()``
    waiting over every queue."""
    owners = list(queues_on_each_master(redis_cluster, "held").values())
    ids = [capp.enqueue("job", (q,), queue=q) for q in owners]
    keys = capp.keys(owners[1])
    claimed = CLAIM.call(capp.redis, CLAIM.keys_for(keys, "w9"), CLAIM.argv("w9", 5, 60_000, 100))
    assert claimed.ids == [ids[1].encode()]
    [holder] = capp.holders()  # the idle queues' empty lease sets leave no holder
    assert (holder.worker, holder.queue, holder.jobs) == ("w9", owners[1], {ids[1]: "job"})
    # a worker that holds a lease and no job (its held set has its sentinel alone)
    idle = capp.keys(owners[2])
    master = nodes[port_of(redis_cluster, owners[2])]
    master.zadd(idle.leases, {"w8": time.time() * 1000 + 60_000})
    master.sadd(idle.held("w8"), SENTINEL)
    assert [(h.worker, h.jobs) for h in capp.holders()] == [("w9", {ids[1]: "job"}), ("w8", {})]
    assert capp.stats(owners[1])["inflight"] == 1
    assert capp.get_job(ids[1]).state == "active"  # type: ignore[union-attr]
    # result(): no CROSSSLOT from one BLPOP over three queues' keys
    t0 = time.monotonic()
    with pytest.raises(ResultTimeout):
        capp.result(ids[0], timeout_s=0.3)
    assert time.monotonic() - t0 < 2.0

    def keep_result() -> None:
        time.sleep(0.3)
        pipe = capp.redis.pipeline(transaction=False)
        for command in store_commands(keys, ids[1].encode(), b'{"sent": 3}', 60_000):
            pipe.execute_command(*command)
        pipe.execute()

    thread = threading.Thread(target=keep_result)
    thread.start()
    assert capp.result(ids[1], timeout_s=10) == {"sent": 3}
    thread.join()
    assert time.monotonic() - t0 < 5.0


def test_one_node_url_with_cluster_true(redis_cluster: ClusterServer, namespace: str) -> None:
    one = f"redis://127.0.0.1:{redis_cluster.ports[0]}/0"
    owners = queues_on_each_master(redis_cluster, "one")
    app = fastq.App(one, cluster=True, namespace=namespace)
    try:
        for queue in owners.values():
            assert len(app.enqueue_many("job", [(i,) for i in range(5)], queue=queue)) == 5
        assert [app.stats(q)["ready"] for q in owners.values()] == [5, 5, 5]
    finally:
        app.close()
    # a plain client of that one node would be refused: the other slots are elsewhere
    elsewhere = next(q for port, q in owners.items() if port != redis_cluster.ports[0])
    plain = fastq.App(one, namespace=namespace)
    try:
        with pytest.raises(MovedError):
            plain.enqueue("job", (1,), queue=elsewhere)
    finally:
        plain.close()


def test_the_cli_on_a_cluster_url(redis_cluster: ClusterServer, capp: fastq.App) -> None:
    owners = list(queues_on_each_master(redis_cluster, "cli").values())
    for n, queue in enumerate(owners):
        capp.enqueue_many("flaky", [(n * 10 + i,) for i in range(n + 1)], queue=queue)
    env = subprocess_env(redis_cluster.url)
    ns = ("--namespace", capp.namespace)
    listed = subprocess.run(fastq_cmd("queues", *ns), env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        [queue, f"ready={n + 1}"] for n, queue in enumerate(owners)
    ]
    worker = subprocess.run(
        fastq_cmd("worker", "--app", "tests.apps.ops_jobs", "-q", ",".join(owners), "--burst", *ns),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert worker.returncode == 0, worker.stderr
    runs = capp.redis.hgetall(f"{capp.namespace}:runs")
    assert runs == {str(n * 10 + i).encode(): b"1" for n in range(3) for i in range(n + 1)}
    assert [capp.stats(q)["processed"] for q in owners] == [1, 2, 3]


def test_replicas_and_a_password(redis_cluster_replicas: ClusterServer) -> None:
    cluster = redis_cluster_replicas
    roles = []
    for port in cluster.ports:
        client = cluster.client(port)
        roles.append(client.info("replication")["role"])
        client.close()
    assert sorted(roles) == ["master"] * 3 + ["slave"] * 3
    namespace = f"t{uuid.uuid4().hex[:12]}"
    app = fastq.App(cluster.url, namespace=namespace)
    try:
        assert len(app.enqueue_many("job", [(i,) for i in range(100)], queue="q")) == 100
        assert app.stats("q")["ready"] == 100
    finally:
        app.close()
    wrong = cluster.url.replace(":pw@", ":s3cret@")
    app = fastq.App(wrong, namespace=namespace)
    try:
        with pytest.raises(RedisRefused) as info:
            app.stats("q")
    finally:
        app.close()
    assert "s3cret" not in str(info.value) and ":***@" in str(info.value)


def test_grouped_queues_on_each_master_are_claimed_round_robin(
    redis_cluster: ClusterServer, capp: fastq.App, nodes: dict[int, redis.Redis]
) -> None:
    owners = queues_on_each_master(redis_cluster, "groups")
    for queue in owners.values():
        capp.enqueue_many("job", [(i,) for i in range(3)], queue=queue, group="big")
        capp.enqueue_many("job", [(i,) for i in range(10, 12)], queue=queue, group="small")
    for port, queue in owners.items():
        keys = capp.keys(queue)
        # the group keys live with the queue's other keys, on its master
        assert nodes[port].lrange(keys.group_ring, 0, -1) == [b"", b"big", b"small"]
        assert capp.stats(queue)["ready"] == 5
        reply = CLAIM.call(capp.redis, CLAIM.keys_for(keys, "w1"), CLAIM.argv("w1", 5, 60_000, 100))
        envs = nodes[port].hmget(keys.jobs, reply.ids)
        args = [orjson.loads(env)[1][0] for env in envs if env is not None]
        assert args == [0, 10, 1, 11, 2]
