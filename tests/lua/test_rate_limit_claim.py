"""claim.lua on a rate-limited queue, and rate_take.lua (per-key limits), on a real server.

Limits here are of a few jobs per hour, so that the seconds a test takes never
change how many tokens a claim finds: the counts asserted are exact.
"""

from __future__ import annotations

import pytest
import redis
from test_scripts import claim, claimed_ids, enqueue

from fastq.protocol import control
from fastq.protocol.contracts import PAUSED, RATE_TAKE, UNLIMITED
from fastq.protocol.keys import QueueKeys
from fastq.validate import RateLimit
from tests.support.keys import namespace_keys

HOUR_MS = 3_600_000


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def per_hour(r: redis.Redis, k: QueueKeys, rate: int, burst: int) -> None:
    control.set_rate_limit(r, k, RateLimit(rate, HOUR_MS, burst))
    r.delete(k.wake)  # the wake-up a new limit leaves, so tests see the claim's own


def redis_now_us(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1_000_000 + int(micros)


def test_a_queue_without_a_limit_says_unlimited_and_has_no_settings(
    r: redis.Redis, k: QueueKeys
) -> None:
    enqueue(r, k, ["a", "b"])
    reply = claim(r, k, "w1", 10)
    assert (len(reply), reply.throttle_ms, reply.rate_limited) == (2, UNLIMITED, False)
    assert not r.exists(k.settings)


def test_a_claim_takes_at_most_the_burst_then_is_throttled_until_the_next_token(
    r: redis.Redis, k: QueueKeys, namespace: str
) -> None:
    per_hour(r, k, 2, 2)  # one token every 30 min, two at once
    enqueue(r, k, [f"j{i}" for i in range(5)])
    first = claim(r, k, "w1", 10)
    assert len(first) == 2 and first.rate_limited and not first.throttled
    before = {key: r.dump(key) for key in namespace_keys(r, namespace)}
    reply = claim(r, k, "w2", 10)
    assert (len(reply), reply.throttled) == (0, True)
    # the next token is due 30 min after the first claim: said as next_due_ms too,
    # so that the worker sleeps until then rather than taking the queue for empty
    assert reply.next_due_ms == reply.throttle_ms
    assert first.now_ms + HOUR_MS // 2 - 1 <= reply.throttle_ms <= first.now_ms + HOUR_MS // 2 + 1
    # a throttled claim writes nothing: no lease, no GCRA step, no wake-up token
    assert {key: r.dump(key) for key in namespace_keys(r, namespace)} == before
    assert r.llen(k.ready) == 3


def test_tokens_come_back_at_the_rate(r: redis.Redis, k: QueueKeys) -> None:
    per_hour(r, k, 1, 3)  # one an hour, three at once
    enqueue(r, k, [f"j{i}" for i in range(5)])
    # as if the last claims were 1.5 hours ahead of the bucket's fill: one token left
    r.hset(k.settings, "rate_tat_us", redis_now_us(r) + 3 * HOUR_MS * 1000 // 2)
    assert len(claim(r, k, "w1", 10)) == 1
    assert claim(r, k, "w1", 10).throttled
    # two hours later (tat moved back): two more
    r.hset(k.settings, "rate_tat_us", redis_now_us(r) + HOUR_MS * 1000 // 2)
    assert len(claim(r, k, "w1", 10)) == 2


def test_a_claim_takes_no_more_than_it_asked_and_spends_only_what_it_took(
    r: redis.Redis, k: QueueKeys
) -> None:
    per_hour(r, k, 5, 5)
    enqueue(r, k, ["a", "b"])
    assert len(claim(r, k, "w1", 1)) == 1  # 4 tokens left
    assert len(claim(r, k, "w1", 10)) == 1  # the queue had one: 3 left
    reply = claim(r, k, "w1", 10)  # an empty queue is not a throttled one
    assert (len(reply), reply.throttled, reply.next_due_ms) == (0, False, -1)
    enqueue(r, k, [f"c{i}" for i in range(9)])
    assert len(claim(r, k, "w1", 10)) == 3
    assert claim(r, k, "w1", 10).throttled


def test_the_wake_up_chain_wakes_siblings_only_while_tokens_remain(
    r: redis.Redis, k: QueueKeys
) -> None:
    per_hour(r, k, 3, 3)
    enqueue(r, k, [f"j{i}" for i in range(6)])
    r.delete(k.wake)  # the enqueue's own token
    assert len(claim(r, k, "w1", 1)) == 1
    assert r.lpop(k.wake) is not None  # work and tokens left: a sibling is woken
    assert len(claim(r, k, "w2", 2)) == 2
    assert r.llen(k.wake) == 0  # work left, but no token: no sibling woken into a throttle


def test_pause_wins_over_the_limit_and_the_reply_says_both(r: redis.Redis, k: QueueKeys) -> None:
    per_hour(r, k, 1, 1)
    enqueue(r, k, ["a"])
    control.pause(r, k)
    reply = claim(r, k, "w1", 10)
    assert (len(reply), reply.paused, reply.rate_limited, reply.next_due_ms) == (
        0,
        True,
        True,
        PAUSED,
    )
    assert not r.hexists(k.settings, "rate_tat_us")  # no token spent while paused


def test_setting_a_limit_starts_afresh_and_wakes_workers_and_off_removes_it(
    r: redis.Redis, k: QueueKeys
) -> None:
    per_hour(r, k, 1, 1)
    enqueue(r, k, ["a", "b", "c"])
    assert len(claim(r, k, "w1", 10)) == 1
    assert claim(r, k, "w1", 10).throttled
    control.set_rate_limit(r, k, RateLimit(2, HOUR_MS, 2))  # a new limit: a full burst
    assert r.lpop(k.wake) is not None
    assert control.rate_limit(r, k) == RateLimit(2, HOUR_MS, 2)
    assert len(claim(r, k, "w1", 10)) == 2
    enqueue(r, k, ["d"])
    control.set_rate_limit(r, k, None)
    assert control.rate_limit(r, k) is None
    assert not r.exists(k.settings)  # nothing else was set: the key is gone
    reply = claim(r, k, "w1", 10)
    assert (claimed_ids(reply), reply.throttle_ms) == (["d"], UNLIMITED)


def test_off_keeps_a_pause(r: redis.Redis, k: QueueKeys) -> None:
    per_hour(r, k, 1, 1)
    control.pause(r, k)
    control.set_rate_limit(r, k, None)
    assert r.hgetall(k.settings) == {b"paused": b"1"}


# -- rate_take.lua: per-key limits --------------------------------------------------


def take(r: redis.Redis, k: QueueKeys, key: str, rate: int, period_ms: int, burst: int) -> int:
    return RATE_TAKE.call(r, RATE_TAKE.keys_for(k, key), RATE_TAKE.argv(rate, period_ms, burst))


def test_take_reserves_each_job_its_own_slot_and_the_state_expires_when_full(
    r: redis.Redis, k: QueueKeys
) -> None:
    waits = [take(r, k, "smtp:a", 1, HOUR_MS, 2) for _ in range(4)]
    assert waits[:2] == [0, 0]  # the burst
    # then one slot an hour apart, each reserved for its job (a come-back-at-the-
    # next-token would send every waiting job back at every token)
    assert HOUR_MS - 1000 <= waits[2] <= HOUR_MS + 1
    assert 2 * HOUR_MS - 1000 <= waits[3] <= 2 * HOUR_MS + 1
    assert take(r, k, "smtp:b", 1, HOUR_MS, 2) == 0  # another key: its own tokens
    # the state lives until the bucket is full again: 4 hours from now
    assert 4 * HOUR_MS - 1000 <= r.pttl(k.rate_state("smtp:a")) <= 4 * HOUR_MS + 2


def test_take_on_a_quiet_key_is_a_fresh_bucket(r: redis.Redis, k: QueueKeys) -> None:
    assert take(r, k, "x", 5, 1000, 1) == 0
    assert 0 < take(r, k, "x", 5, 1000, 1) <= 201  # 200 ms, rounded up to the ms
    r.delete(k.rate_state("x"))  # what the expiry does once the bucket is full
    assert take(r, k, "x", 5, 1000, 1) == 0


@pytest.mark.parametrize(
    "argv", [(0, 1000, 1), (5, 0, 1), (5, 1000, 0), ("x", 1000, 1), (5, 1000, 1.5)]
)
def test_take_refuses_bad_argv_and_writes_nothing(
    r: redis.Redis, k: QueueKeys, namespace: str, argv: tuple[object, ...]
) -> None:
    with pytest.raises(redis.ResponseError, match="rate_take: "):
        r.evalsha(RATE_TAKE.script.sha, 1, k.rate_state("x"), *argv)  # type: ignore[no-untyped-call]
    assert namespace_keys(r, namespace) == []
