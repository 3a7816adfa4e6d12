"""A worker's epoch (``lua/lib/epoch.lua``): once a call of a newer epoch has landed,
a claim, an ack, a hand-back or an extension carrying an older one (a request the worker gave up
on, landing late on a connection it had closed) is refused and changes nothing."""

from __future__ import annotations

import pytest
import redis

from fastq.protocol.contracts import ACK, CLAIM, EXTEND, RELEASE, ReleaseMode, is_stale
from fastq.protocol.contracts import recorded_epoch as recorded_in
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes
from tests.lua.test_scripts import claimed_ids, enqueue
from tests.support.keys import namespace_keys


def claim(r: redis.Redis, k: QueueKeys, worker: str, n: int, epoch: int) -> list[str]:
    argv = CLAIM.argv(worker, n, 60_000, 100, epoch)
    return claimed_ids(CLAIM.call(r, CLAIM.keys_for(k, worker), argv))


def ack(r: redis.Redis, k: QueueKeys, worker: str, out: Outcomes, epoch: int) -> int:
    return ACK.call(r, ACK.keys_for(k, worker), out.ack_argv(10**9, 1000, worker, epoch))


def extend(r: redis.Redis, k: QueueKeys, worker: str, epoch: int) -> int:
    argv = EXTEND.argv(worker, 120_000, epoch)
    return EXTEND.call(r, EXTEND.keys_for(k, worker), argv)


def snapshot(r: redis.Redis, namespace: str) -> dict[bytes, object]:
    return {key: (r.dump(key), r.pttl(key) > 0) for key in namespace_keys(r, namespace)}


def refused(r: redis.Redis, namespace: str, call: object, recorded: int) -> None:
    """``call()`` is refused as stale, and leaves every key as it was."""
    before = snapshot(r, namespace)
    with pytest.raises(redis.ResponseError) as caught:
        call()  # type: ignore[operator]
    assert is_stale(caught.value) and recorded_in(caught.value) == recorded, caught.value
    assert snapshot(r, namespace) == before


def test_calls_of_an_older_epoch_are_refused_and_change_nothing(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b", "c", "d"])
    assert claim(r, k, "w1", 2, epoch=0) == ["a", "b"]
    assert r.get(k.epoch("w1")) is None  # a worker that never gave up writes no record
    # the worker gave up on a request: its next call records epoch 1
    assert ack(r, k, "w1", Outcomes(done=[b"a"]), epoch=1) == 1
    assert r.get(k.epoch("w1")) == b"1"
    assert 0 < r.pttl(k.epoch("w1")) <= 86_400_000

    refused(r, namespace, lambda: claim(r, k, "w1", 2, epoch=0), recorded=1)
    refused(r, namespace, lambda: ack(r, k, "w1", Outcomes(done=[b"b"]), epoch=0), recorded=1)
    refused(
        r,
        namespace,
        lambda: ack(r, k, "w1", Outcomes(retry=[(b"b", 0, b"{}")], failed=1), epoch=0),
        recorded=1,
    )
    refused(r, namespace, lambda: extend(r, k, "w1", epoch=0), recorded=1)

    # the calls of its epoch, or a newer one, go on as ever
    assert extend(r, k, "w1", epoch=1) == 1
    assert claim(r, k, "w1", 1, epoch=2) == ["c"]
    assert r.get(k.epoch("w1")) == b"2"
    refused(r, namespace, lambda: claim(r, k, "w1", 1, epoch=1), recorded=2)
    assert ack(r, k, "w1", Outcomes(done=[b"b", b"c"]), epoch=2) == 2
    # another worker's epoch is its own
    assert claim(r, k, "w2", 1, epoch=0) == ["d"]


def test_a_request_given_up_on_that_lands_after_the_next_leases_nothing(
    r: redis.Redis, namespace: str
) -> None:
    """What a cut connection did (issue 23, item 10): the request a worker gave up on
    (an ack of its batch and the next claim) reached Redis after the one it sent on
    its new connection (the same ack again, every lease handed back, a claim)."""
    k = QueueKeys(namespace, "q")
    enqueue(r, k, [str(i) for i in range(10)])
    assert claim(r, k, "w1", 2, epoch=0) == ["0", "1"]
    batch = Outcomes(done=[b"0", b"1"])

    # the request sent on the new connection, with the epoch raised
    assert ack(r, k, "w1", batch, epoch=1) == 2
    release_all = RELEASE.argv("w1", ReleaseMode.UNSTARTED, 2)
    RELEASE.call(r, RELEASE.keys_for(k, "w1"), release_all)
    assert claim(r, k, "w1", 2, epoch=1) == ["2", "3"]

    # the one given up on lands now: refused, both its calls
    refused(r, namespace, lambda: ack(r, k, "w1", batch, epoch=0), recorded=1)
    refused(r, namespace, lambda: claim(r, k, "w1", 2, epoch=0), recorded=1)

    # the worker holds exactly what it received, and nothing was settled twice
    assert r.smembers(k.held("w1")) - {b"2", b"3"} == {
        b"fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"
    }
    assert r.hget(k.stats, "processed") == b"2"
    assert r.hget(k.stats, "stale_acks") is None
    assert r.llen(k.ready) == 6


def test_a_hand_back_given_up_on_that_lands_late_takes_back_nothing_claimed_since(
    r: redis.Redis, namespace: str
) -> None:
    """A stopping worker's hand-back of its unstarted jobs, given up on: its next
    request handed every lease back and claimed the same jobs again (they were at the
    front). The hand-back landing late must not take them from the worker running
    them (another would run them too); its master's and a reaper's calls, which
    carry no epoch, still move them."""
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["0", "1", "2"])
    assert claim(r, k, "w1", 2, epoch=0) == ["0", "1"]
    late = RELEASE.argv("w1", ReleaseMode.UNSTARTED, 2, ids=[b"0", b"1"], epoch=0)

    release_all = RELEASE.argv("w1", ReleaseMode.UNSTARTED, 2, epoch=1)
    assert RELEASE.call(r, RELEASE.keys_for(k, "w1"), release_all).moved == 2
    assert sorted(claim(r, k, "w1", 2, epoch=1)) == ["0", "1"]

    refused(r, namespace, lambda: RELEASE.call(r, RELEASE.keys_for(k, "w1"), late), recorded=1)
    assert r.smembers(k.held("w1")) >= {b"0", b"1"}

    # the worker's own hand-back of its epoch, and its master's (no epoch), move them
    own = RELEASE.argv("w1", ReleaseMode.UNSTARTED, 2, ids=[b"0"], epoch=1)
    assert RELEASE.call(r, RELEASE.keys_for(k, "w1"), own).moved == 1
    master = RELEASE.argv("w1", ReleaseMode.STALLED, 2, "was killed by SIGKILL", ids=[b"1"])
    assert RELEASE.call(r, RELEASE.keys_for(k, "w1"), master).moved == 1
    assert r.lrange(k.ready, 0, -1) == [b"2", b"0", b"1"]
