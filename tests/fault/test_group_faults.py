"""Grouped jobs under faults: children of a real ``fastq pool`` SIGKILLed while it
drains a queue of several groups. Every job ran, none was lost, re-runs stay
within what the killed children held, and what they held went back to their
groups (the queue's list of the jobs of no group stays empty)."""

from __future__ import annotations

from typing import Callable

import pytest
import redis

import fastq
from tests.support.pool import Pool, drain_while_killing_children

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]


def test_sigkill_children_while_draining_groups(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n, batch, tenants = 4000, 50, 4
    # 3 ms jobs on 4 children: 80% takes 2.4 s at least, three times the kills' 0.8 s
    for t in range(tenants):
        calls = [(i, 0.003) for i in range(t, n, tenants)]
        app.enqueue_many("work", calls, queue="q", group=f"tenant-{t}")
    k = app.keys("q")
    assert r.zcard(k.group_ready) == n and r.llen(k.ready) == 0
    pool = pools("-c", "4", "--batch", str(batch))
    drain_while_killing_children(
        app,
        r,
        pool,
        n,
        batch,
        children=4,
        until=0.8,
        max_kills=4,
        every_s=0.2,
        min_kills=3,
        in_flight=1,
    )
    # every hand-back went to the front of its job's group, none to the plain list
    assert r.hget(k.stats, "stalled") is not None or r.hget(k.stats, "orphaned") is not None
    assert r.exists(k.group_ready) == 0
    assert r.lrange(k.group_ring, 0, -1) == [b""]
