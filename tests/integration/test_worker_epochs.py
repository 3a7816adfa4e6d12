"""Worker epochs with real round trips: on a Redis Cluster, a request a worker gave
up on, landing on each master after the worker's next request, leases nothing there
(each queue keeps its worker's epoch in its own slot); on one Redis, a worker whose
id left a newer epoch behind moves past it."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import redis

import fastq
from fastq.protocol.contracts import CLAIM, is_stale
from fastq.testing.cluster_server import ClusterServer
from fastq.worker.roundtrip import RoundTrip, StaleEpoch
from tests.support.cluster import port_of, queues_on_each_master
from tests.support.workers import drain

pytestmark = pytest.mark.timeout(60)

SENTINEL = b"fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"


def test_a_request_given_up_on_leases_nothing_on_any_master(
    redis_cluster: ClusterServer, capp: fastq.App
) -> None:
    queues = sorted(queues_on_each_master(redis_cluster, "e").values())
    assert len({port_of(redis_cluster, q) for q in queues}) == 3
    ids = {q: capp.enqueue_many("job", [(i,) for i in range(4)], queue=q) for q in queues}
    rt = RoundTrip(
        lambda: capp.new_client(retries=0),
        "w1",
        queues,
        capp.namespace,
        cluster=True,
        lease_ms=60_000,
        dead_max_age_ms=60_000,
        dead_max_len=100,
        max_stalls=1,
    )
    try:
        # the claims of a request the worker gives up on (its bytes still on the way)
        late = [
            CLAIM.command(CLAIM.keys_for(rt.keys[q], "w1"), CLAIM.argv("w1", 2, 60_000, 100, 0))
            for q in queues
        ]
        rt.give_up()
        claims = rt.request({}, queues, 2, release_all=True).result()
        got = {c.queue: set(c.reply.ids) for c in claims}
        assert got == {q: {i.encode() for i in ids[q][:2]} for q in queues}
        client = rt.client
        assert [client.get(rt.keys[q].epoch("w1")) for q in queues] == [b"1"] * 3

        # the late request lands now, on every master: refused, all of it
        assert all(is_stale(reply) for reply in rt.send(late))
        for q in queues:
            assert client.smembers(rt.keys[q].held("w1")) - {SENTINEL} == got[q]
            assert client.llen(rt.keys[q].ready) == 2

        # a round trip of the worker's own refused as stale says which epoch to pass
        rt.epoch = 0
        with pytest.raises(StaleEpoch) as refused:
            rt.request({}, queues, 1).result()
        assert refused.value.recorded == 1
        rt.give_up(refused.value.recorded)
        assert rt.epoch == 2
        assert all(len(c) == 1 for c in rt.request({}, queues, 1).result())
    finally:
        rt.close()


def test_a_worker_whose_id_had_a_newer_epoch_moves_past_it(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker id used again (a pool's master restarted as the same pid in a
    container names its children as before) finds the epoch its previous life left:
    its first round trip is refused, changes nothing, and the next carries a newer
    epoch; every job runs once."""
    k = app.keys("q")
    r.set(k.epoch("w-again"), 5, px=60_000)
    runs: Counter[int] = Counter()

    @app.job(queue="q")
    def count(i: int) -> None:
        runs[i] += 1

    count.enqueue_many([(i,) for i in range(50)])
    with caplog.at_level(logging.WARNING, logger="fastq.worker"):
        drain(app, ["q"], worker_id="w-again", batch_size=10)
    assert runs == {i: 1 for i in range(50)}
    assert int(r.get(k.epoch("w-again")) or 0) == 6
    said = [m for m in caplog.messages if "w-again" in m]
    assert len(said) == 2 and "STALE epoch 0 < 5" in said[0] and "Redis back" in said[1], said
