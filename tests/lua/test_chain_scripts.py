"""lib/chains.lua: a link's rest of chain (enqueue's "then") waits in the queue's
chained hash while the link lives, moves to chain_out in the very call that acks it
done (and is named in the ack's reply), and goes when the link ends otherwise."""

from __future__ import annotations

import orjson
import pytest
import redis
from test_scripts import ack, claim, env, release

from fastq.protocol.contracts import ACK, ACK_TAKEN, CANCEL, ENQUEUE, PURGE, TAKE, ReleaseMode
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes

REST = '[{"c":"ch","i":2,"q":"q","id":"ch.2","e":["j",[],1764579600000],"p":0}]'


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def enqueue_link(r: redis.Redis, k: QueueKeys, job_id: str, rest: str = REST) -> int:
    extras = orjson.dumps({"then": rest})
    argv = ENQUEUE.argv(0, 0, extras, [job_id], [env(job_id)])
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added


def ack_raw(r: redis.Redis, k: QueueKeys, worker: str, out: Outcomes) -> object:
    return r.evalsha(
        ACK.script.sha,
        len(ACK.keys_for(k, worker)),
        *ACK.keys_for(k, worker),
        *out.ack_argv(10**9, 1000, worker),
    )


def test_the_rest_moves_out_with_the_ack_that_ends_the_link_done_once(
    r: redis.Redis, k: QueueKeys
) -> None:
    assert enqueue_link(r, k, "ch") == 1
    assert r.hget(k.chained, "ch") == REST.encode()
    claim(r, k, "w1", 1)
    reply = ack_raw(r, k, "w1", Outcomes(done=[b"ch"]))
    assert ACK.parse(reply) == 1
    assert ACK.chains_moved(reply) == ["ch"]
    assert ACK.batches_ended(reply) == []
    assert r.hlen(k.chained) == 0
    stamp, _, rest = r.hget(k.chain_out, "ch").partition(b" ")
    assert int(stamp) > 0 and rest == REST.encode()
    # the same ack sent again (its reply lost): nothing moves twice
    again = ack_raw(r, k, "w1", Outcomes(done=[b"ch"]))
    assert ACK.parse(again) == 0 and ACK.chains_moved(again) == []
    assert r.hlen(k.chain_out) == 1
    # the id enqueued again (a forwarder's second try) adds nothing, writes no rest
    assert enqueue_link(r, k, "ch") == 0
    assert r.hlen(k.chained) == 0


def test_a_retry_keeps_the_rest_and_a_death_drops_it(r: redis.Redis, k: QueueKeys) -> None:
    enqueue_link(r, k, "a")
    enqueue_link(r, k, "b")
    claim(r, k, "w1", 2)
    reply = ack_raw(r, k, "w1", Outcomes(retry=[(b"a", 0, env("a"))], dead=[(b"b", env("b"))]))
    assert ACK.chains_moved(reply) == []
    assert r.hkeys(k.chained) == [b"a"]
    assert r.exists(k.chain_out) == 0


def test_a_buried_or_cancelled_link_drops_its_rest(r: redis.Redis, k: QueueKeys) -> None:
    enqueue_link(r, k, "p")
    enqueue_link(r, k, "c")
    claim(r, k, "w1", 1)  # p: its worker dies past max_stalls
    release(r, k, "w1", ReleaseMode.STALLED, ["p"], max_stalls=0)
    assert r.hkeys(k.chained) == [b"c"]
    argv = CANCEL.argv("", 10, ["w1"], ["c"])  # w1 still has a lease entry
    assert CANCEL.call(r, [*CANCEL.keys_for(k), k.held("w1")], argv).stopped == 1
    assert r.hlen(k.chained) == 0


def test_then_is_refused_with_several_jobs_or_not_an_array(r: redis.Redis, k: QueueKeys) -> None:
    extras = orjson.dumps({"then": REST})
    argv = ENQUEUE.argv(0, 0, extras, ["x", "y"], [env("x"), env("y")])
    with pytest.raises(
        redis.ResponseError, match=r'"then" \(the rest of a chain\) goes with one job'
    ):
        ENQUEUE.call(r, ENQUEUE.keys_for(k), argv)
    with pytest.raises(redis.ResponseError, match="then must be the rest of a chain"):
        enqueue_link(r, k, "x", rest="{}")
    assert r.exists(k.jobs, k.chained) == 0


def test_a_plain_ack_still_answers_a_number(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.chained, "other", REST)  # a chained job elsewhere in the queue
    r.hset(k.jobs, "plain", env("plain"))
    r.lpush(k.ready, "plain")
    claim(r, k, "w1", 1)
    assert ack(r, k, "w1", Outcomes(done=[b"plain"])) == 1
    assert ack_raw(r, k, "w1", Outcomes()) == 0


def test_an_at_most_once_link_done_is_left_for_a_reaper_at_once(
    r: redis.Redis, k: QueueKeys
) -> None:
    """ack_taken answers no list of links: it marks them 0, forward at once."""
    enqueue_link(r, k, "x")
    enqueue_link(r, k, "y")
    claim(r, k, "w1", 2)
    TAKE.call(r, TAKE.keys_for(k, "w1"), TAKE.argv([b"x", b"y"]))
    argv = ACK_TAKEN.argv(10**9, 1000, [(1, 1)], dead=[(b"y", env("y"))], done_ids=[b"x"])
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), argv)
    ACK_TAKEN.call(r, ACK_TAKEN.keys_for(k, "w1"), argv)  # resent: nothing moves twice
    assert r.hgetall(k.chain_out) == {b"x": b"0 " + REST.encode()}
    assert r.exists(k.chained) == 0


def test_a_purged_link_drops_its_rest(r: redis.Redis, k: QueueKeys) -> None:
    enqueue_link(r, k, "w")
    taken, deleted = PURGE.call(r, PURGE.keys_for(k), PURGE.argv(10, True, True, True, True))
    assert (taken, deleted) == (1, 1)
    assert r.exists(k.chained, k.jobs) == 0
