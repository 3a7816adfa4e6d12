"""A queue's slot migrating between masters of a Redis Cluster (resharding), done
by hand as ``redis-cli --cluster reshard`` does it: the slot ``IMPORTING`` on the
next master, ``MIGRATING`` on its own, every key of the slot moved with
``MIGRATE``, and only then (or never, while a test looks) finalized with
``CLUSTER SETSLOT <slot> NODE``.

What holds while the slot is open: a worker's command whose keys have all left
follows the ASK to the importing master; the scripts, which name keys that do
not exist, meet TRYAGAIN there (Redis' rule for a command of several keys), so
workers, producers and the reaper back off as from any outage and no job runs,
none is lost; once the slot is finalized, the queue drains, every job once.

A cluster of their own: a test leaves a slot on another master."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
from redis import exceptions as rex
from redis.cluster import key_slot

import fastq
from fastq.protocol import scripts
from fastq.protocol.contracts import CLAIM
from fastq.reaper.reaper import Reaper
from fastq.testing.cluster_server import ClusterServer
from fastq.worker.roundtrip import RoundTrip
from tests.support.cluster import port_of
from tests.support.workers import drain, drain_in_thread

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServer]:
    with ClusterServer(3) as c:
        yield c


@pytest.fixture
def capp(cluster: ClusterServer, namespace: str) -> Iterator[fastq.App]:
    a = fastq.App(cluster.url, namespace=namespace)
    yield a
    a.close()


@dataclass
class OpenSlot:
    """A queue's slot on its way from one master (``source``) to another."""

    cluster: ClusterServer
    slot: int
    source: int  # ports
    target: int

    def on(self, port: int, *command: object) -> Any:
        """``command``'s reply from the node on ``port``."""
        node = self.cluster.client(port)
        try:
            return node.execute_command(*command)
        finally:
            node.close()

    def open(self) -> None:
        source_id, target_id = (
            self.on(self.source, "CLUSTER", "MYID"),
            self.on(self.target, "CLUSTER", "MYID"),
        )
        self.on(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", source_id)
        self.on(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", target_id)

    def migrate_keys(self) -> int:
        """Move every key of the slot left on the source; returns how many."""
        keys = self.on(self.source, "CLUSTER", "GETKEYSINSLOT", self.slot, 10_000)
        if keys:
            self.on(self.source, "MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "KEYS", *keys)
        return len(keys)

    def is_open(self) -> bool:
        nodes = self.on(self.source, "CLUSTER", "NODES").decode()
        return f"[{self.slot}->-" in nodes  # the source's own line: migrating to ...

    def finalize(self) -> None:
        """Give the slot to the target on every master (the target first)."""
        target_id = self.on(self.target, "CLUSTER", "MYID")
        for port in [self.target, *(p for p in self.cluster.ports if p != self.target)]:
            self.on(port, "CLUSTER", "SETSLOT", self.slot, "NODE", target_id)


@pytest.fixture
def moving(cluster: ClusterServer) -> Iterator[list[OpenSlot]]:
    """Slots a test opens, finalized at its end (the next test finds a stable map)."""
    opened: list[OpenSlot] = []
    yield opened
    for moved in opened:
        if moved.is_open():
            moved.finalize()
    cluster.wait_ok()


def open_slot(cluster: ClusterServer, queue: str, opened: list[OpenSlot]) -> OpenSlot:
    source = port_of(cluster, queue)
    target = next(port for port in cluster.ports if port != source)
    moving = OpenSlot(cluster, key_slot(f"{{{queue}}}".encode()), source, target)
    moving.open()
    opened.append(moving)
    return moving


def test_a_round_trip_follows_ask_to_the_importing_master(
    cluster: ClusterServer, capp: fastq.App, moving: list[OpenSlot]
) -> None:
    """Keys moved, slot not finalized: the source answers ASK; the wire resends
    each such command after ASKING to the target, whose replies take their
    places. A script (keys that do not exist among those it names) meets
    TRYAGAIN there, and the round trip fails as a lost one."""
    queue = "ask"
    capp.enqueue_many("job", [(i,) for i in range(3)], queue=queue)
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
        k = rt.keys[queue]
        assert rt.client.llen(k.ready) == 3  # the slot map read before the move
        slot = open_slot(cluster, queue, moving)
        assert slot.migrate_keys() > 0
        claim = CLAIM.command(CLAIM.keys_for(k, "w1"), CLAIM.argv("w1", 10, 60_000, 100))
        rt.write(
            [
                (scripts.PLAIN, (), ("LLEN", k.ready)),
                claim,
                (scripts.PLAIN, (), ("HGET", k.settings, "paused")),
            ]
        )
        ready, claimed, paused = rt.read(3)
        assert (ready, paused) == (3, None)
        assert isinstance(claimed, rex.TryAgainError), claimed
        # the wire's connections still serve the next round trip, on the same map
        rt.write([(scripts.PLAIN, (), ("LLEN", k.ready))])
        assert rt.read(1) == [3]
        assert slot.is_open()
    finally:
        rt.close()


def test_a_queue_waits_for_its_slot_to_be_finalized_and_then_drains_once(
    cluster: ClusterServer,
    capp: fastq.App,
    moving: list[OpenSlot],
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = "reshard"
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    @capp.job(queue=queue)
    def count(i: int) -> None:
        with lock:
            runs[i] += 1

    capp.declare_queue(queue)
    capp.enqueue_many("count", [(i,) for i in range(50)], queue=queue)
    slot = open_slot(cluster, queue, moving)
    slot.migrate_keys()

    worker, thread = drain_in_thread(capp, [queue])
    # a producer and the reaper meet TRYAGAIN too: a fault to back off from, not a bug
    with pytest.raises(fastq.RedisUnavailable):
        capp.enqueue("count", (50,), queue=queue)
    client = capp.new_client(retries=0)
    try:
        with caplog.at_level(logging.WARNING, logger="fastq.reaper"):
            Reaper(capp, [queue], handle_signals=False).sweep(client)
    finally:
        client.close()
    said = [r.getMessage().split(": ")[1] for r in caplog.records if r.name == "fastq.reaper"]
    assert said == ["Redis unavailable"], caplog.text
    time.sleep(1.0)
    assert slot.is_open() and thread.is_alive()
    assert sum(runs.values()) == 0  # Redis serves no script of the queue's meanwhile

    slot.finalize()
    thread.join(30)
    assert not thread.is_alive()
    assert runs == Counter(range(50))
    stats = capp.stats(queue)
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (50, 0, 0)
    assert worker.jobs_run == 50

    # the slot map moved for good: the next drain goes where it says (MOVED)
    capp.enqueue_many("count", [(i,) for i in range(50, 60)], queue=queue)
    drain(capp, [queue])
    assert runs == Counter(range(60))
    assert port_of(cluster, queue) == slot.target
