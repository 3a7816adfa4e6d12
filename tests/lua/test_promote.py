"""Scheduling and promotion on a real server: slots keep jobs due in the same
millisecond in order, priorities ride in sched_prio (never decoded from an
envelope), retries keep the front, and a delayed enqueue earlier than everything
scheduled wakes an idle worker."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from fastq.protocol.contracts import ACK, CLAIM, ENQUEUE, REAP, ClaimReply, due_at
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes


def env(job_id: str, priority: int = 0, old: bool = False) -> bytes:
    """An envelope: the current format ("p" only when not 0), or the one before."""
    if old:
        return orjson.dumps(
            {
                "id": job_id,
                "args": [],
                "kwargs": {},
                "name": "j",
                "queue": "q",
                "priority": priority,
            }
        )
    t = int(time.time() * 1000)
    return orjson.dumps(["j", [], t, {"p": priority}] if priority else ["j", [], t])


def enqueue(r: redis.Redis, k: QueueKeys, ids: list[str], due: object, priority: int = 0) -> int:
    argv = ENQUEUE.argv(priority, due, b"", ids, [env(i, priority) for i in ids])  # type: ignore[arg-type]
    return ENQUEUE.call(r, ENQUEUE.keys_for(k), argv).added


def claim(r: redis.Redis, k: QueueKeys, n: int, promote_max: int = 1000) -> ClaimReply:
    return CLAIM.call(r, CLAIM.keys_for(k, "w1"), CLAIM.argv("w1", n, 60_000, promote_max))


def now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_until(r: redis.Redis, ms: int) -> None:
    while now_ms(r) < ms:
        time.sleep(0.002)


def drain_ids(r: redis.Redis, k: QueueKeys, n: int = 500, promote_max: int = 1000) -> list[str]:
    """Claim until a claim comes back empty and nothing is left due."""
    out: list[str] = []
    while True:
        reply = claim(r, k, n, promote_max)
        out += [i.decode() for i in reply.ids]
        if not len(reply) and reply.next_due_ms != reply.now_ms:
            return out


def test_jobs_due_in_the_same_millisecond_come_out_in_the_order_they_were_scheduled(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    # far enough ahead that every enqueue lands before it, however loaded the box (at
    # 300 ms, Valkey's run beside CI's first run took longer: the last 10 were due)
    at = now_ms(r) + 3000
    # ids whose bytes sort against their order; calls beyond a millisecond's 2,047
    # slots, then more calls for the same millisecond
    first = [f"z{9999 - i:04d}" for i in range(3000)]
    for lo in range(0, 3000, 1000):  # 1,000 jobs a call at most
        assert enqueue(r, k, first[lo : lo + 1000], due_at(at)) == 1000
    second = [f"a{i}" for i in range(10)]
    for job_id in second:
        enqueue(r, k, [job_id], due_at(at))
    scores = [s for _, s in r.zrange(k.scheduled, 0, -1, withscores=True)]
    assert [int(s) for s in scores] == [at] * 2047 + [at + 1] * 963  # spilled: never early
    wait_until(r, at + 2)
    # promoted 700 at a time: FIFO across the calls of a promotion too
    assert drain_ids(r, k, promote_max=700) == first + second


def test_a_claim_before_the_due_time_promotes_nothing(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["later"], 200)
    reply = claim(r, k, 10)
    assert len(reply) == 0 and r.zcard(k.scheduled) == 1
    assert reply.now_ms < reply.next_due_ms <= reply.now_ms + 200


def test_priorities_ride_in_a_side_hash_only_for_jobs_that_have_one(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    at = now_ms(r) + 200
    enqueue(r, k, ["p0-a", "p0-b"], due_at(at))
    assert not r.exists(k.sched_prio)  # a queue without priorities pays nothing
    enqueue(r, k, ["p5-a"], due_at(at), priority=5)
    enqueue(r, k, ["m3-a"], due_at(at), priority=-3)
    enqueue(r, k, ["p5-b", "p5-c"], due_at(at), priority=5)
    enqueue(r, k, ["p0-c"], due_at(at))
    assert r.hgetall(k.sched_prio) == {b"p5-a": b"5", b"p5-b": b"5", b"p5-c": b"5", b"m3-a": b"-3"}
    # the priority is read from the side hash, not the envelope
    r.hset(k.jobs, "p5-b", b"not json at all")
    wait_until(r, at + 1)
    assert drain_ids(r, k) == ["p5-a", "p5-b", "p5-c", "p0-a", "p0-b", "p0-c", "m3-a"]
    assert not r.exists(k.sched_prio)  # promoted jobs leave it


def test_a_due_retry_goes_to_the_front_and_a_due_delayed_job_to_the_back(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["failing"], 0)
    assert claim(r, k, 1).ids == [b"failing"]
    out = Outcomes(retry=[(b"failing", 50, env("failing"))], failed=1)
    ACK.call(r, ACK.keys_for(k, "w1"), out.ack_argv(60_000, 100))
    enqueue(r, k, ["delayed"], 50)
    enqueue(r, k, ["queued-1", "queued-2"], 0)
    score = r.zscore(k.scheduled, "failing")
    assert score == int(score)  # a retry's score is a whole number of ms
    time.sleep(0.08)
    assert drain_ids(r, k, n=1) == ["failing", "queued-1", "queued-2", "delayed"]


@pytest.mark.parametrize("old", [False, True], ids=["envelope", "envelope-before"])
def test_a_due_retry_with_a_priority_keeps_it(r: redis.Redis, namespace: str, old: bool) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["urgent"], 0, priority=4)
    assert claim(r, k, 1).ids == [b"urgent"]
    out = Outcomes(retry=[(b"urgent", 20, env("urgent", 4, old))], failed=1)
    ACK.call(r, ACK.keys_for(k, "w1"), out.ack_argv(60_000, 100))
    enqueue(r, k, ["plain"], 0)
    enqueue(r, k, ["high"], 0, priority=2)  # below the retried job's 4, read from its envelope
    time.sleep(0.05)
    assert drain_ids(r, k, n=1) == ["urgent", "high", "plain"]


def test_a_full_promotion_claims_nothing_until_every_due_job_is_promoted(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    at = now_ms(r) + 100
    enqueue(r, k, [f"low{i}" for i in range(250)], due_at(at))
    enqueue(r, k, ["high"], due_at(at), priority=1)  # the last one scheduled
    wait_until(r, at + 1)
    r.delete(k.wake)
    reply = claim(r, k, 10, promote_max=100)
    assert len(reply) == 0 and reply.next_due_ms == reply.now_ms  # "due now: claim again"
    assert r.llen(k.wake) == 1  # ... and a token says so to an idle sibling
    assert claim(r, k, 10, promote_max=100).ids == []
    # the third promotes the last 51 and claims: the job of highest priority first
    assert claim(r, k, 1, promote_max=100).ids == [b"high"]


@pytest.mark.parametrize("earlier", [True, False])
def test_a_delayed_enqueue_wakes_idle_workers_only_when_it_is_due_first(
    r: redis.Redis, namespace: str, earlier: bool
) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["in-a-minute"], 60_000)
    r.delete(k.wake)
    enqueue(r, k, ["next"], 1_000 if earlier else 120_000)
    assert r.llen(k.wake) == (1 if earlier else 0)
    enqueue(r, k, ["same-ms"], due_at(int(r.zscore(k.scheduled, "in-a-minute"))))  # type: ignore[arg-type]
    assert r.llen(k.wake) == (1 if earlier else 0)  # not earlier than the earliest


def test_the_reaper_promotes_and_leaves_a_token(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    enqueue(r, k, ["a", "b"], 20, priority=2)
    r.delete(k.wake)
    time.sleep(0.04)
    reaped = REAP.call(r, REAP.keys_for(k), REAP.argv(1000, 60_000, 100))
    assert reaped.promoted == 2 and r.llen(k.wake) == 1
    assert r.zrange(k.prio, 0, -1) == [b"a", b"b"] and not r.exists(k.sched_prio)


@pytest.mark.parametrize(
    "due",
    ["@", "@abc", "@-1", "@1.5", "@inf", "@nan", "@99999999999999999", "-5", "nan", "inf"],
)
def test_a_bad_due_time_is_refused_and_nothing_is_written(
    r: redis.Redis, namespace: str, due: str
) -> None:
    k = QueueKeys(namespace, "q")
    with pytest.raises(redis.ResponseError, match="fastq enqueue: (@at_ms|delay_ms) must"):
        enqueue(r, k, ["x"], due)
    assert r.keys(f"{namespace}:*") == []


def test_an_absolute_due_time_in_the_past_is_ready_now(r: redis.Redis, namespace: str) -> None:
    k = QueueKeys(namespace, "q")
    r.delete(k.wake)
    enqueue(r, k, ["late"], due_at(now_ms(r) - 60_000))
    assert r.zcard(k.scheduled) == 0 and r.lrange(k.ready, 0, -1) == [b"late"]
    assert r.llen(k.wake) == 1
