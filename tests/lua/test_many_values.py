"""Every script takes lists of any length: Lua's unpack() takes about 8,000 values at
most, and a script stopped by its error ('too many results to unpack') keeps the
writes it made before it, so each list goes to Redis in calls of at most 4,000
(lib/many.lua). A raw-protocol client may claim 10,000 jobs in one call, then ack or
release them in one call; each must apply whole. (A cancel takes 1,000 ids a call
at most, a purge 5,000: their scripts refuse more before any write.)"""

from __future__ import annotations

import redis
from test_scripts import ack, claim, enqueue, held, release_reply

from fastq.protocol.contracts import ReleaseMode
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes

N = 10_000  # more values than one unpack() takes


def fill(r: redis.Redis, k: QueueKeys) -> list[str]:
    ids = [f"j{i}" for i in range(N)]
    for lo in range(0, N, 1000):
        assert enqueue(r, k, ids[lo : lo + 1000]) == 1000
    return ids


def test_a_claim_and_an_ack_of_ten_thousand_jobs_apply_whole(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    fill(r, k)
    claimed = [i.decode() for i in claim(r, k, "w", N).ids]
    assert len(claimed) == N and len(held(r, k, "w")) == N
    assert ack(r, k, "w", Outcomes(done=claimed)) == N
    assert held(r, k, "w") == set()
    assert r.hlen(k.jobs) == 0
    assert int(r.hget(k.stats, "processed") or 0) == N


def test_a_release_of_ten_thousand_jobs_returns_them_all_in_order(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    ids = fill(r, k)
    claimed = [i.decode() for i in claim(r, k, "w", N).ids]
    release_reply(r, k, "w", ReleaseMode.UNSTARTED, claimed)
    assert held(r, k, "w") == set()
    assert [i.decode() for i in r.lrange(k.ready, 0, -1)][::-1] == ids
