"""A pool killed whole (its master and every child at once: the OOM killer, a
container's kill) and started again on the same host: the new pool takes over what
the dead one held at once. Its children's finished jobs are acknowledged from
their heartbeat board (a file in the pool's state directory), the job each was
running runs again, and the rest go back to the front: nothing waits for a lease
to lapse, and no finished job runs twice."""

from __future__ import annotations

import time
from typing import Callable

import psutil
import pytest
import redis

import fastq
from tests.support.pool import Pool, gone, runs, wait_until

CHILDREN = 4


def kill_whole(pool: Pool, master_first: bool) -> None:
    kids = pool.children()
    assert len(kids) == CHILDREN, pool.log()
    order: list[psutil.Process] = [psutil.Process(pool.proc.pid), *kids]
    if not master_first:
        order.reverse()
    for proc in order:
        proc.kill()
    pool.proc.wait()
    wait_until(lambda: all(gone(kid) for kid in kids), 10, "the children gone")


@pytest.mark.parametrize("master_first", [True, False], ids=["master-first", "children-first"])
def test_a_pool_killed_whole_is_taken_over_at_once_by_the_next(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], master_first: bool
) -> None:
    n = 3000
    app.enqueue_many("work", [(i, 0.004) for i in range(n)], queue="q")
    # no reaper in either pool: only the take-over can return the dead pool's jobs
    # before their leases lapse (60 s)
    args = ("-c", str(CHILDREN), "--batch", "20", "--no-reaper")
    pool = pools(*args)
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    kill_whole(pool, master_first)
    held = app.stats("q")["inflight"]
    assert held > 0  # leases the dead pool held
    restarted = time.monotonic()
    pools(*args)
    wait_until(
        lambda: app.stats("q")["processed"] == n and app.stats("q")["inflight"] == 0,
        10,
        "the rest drained within 10 s of the restart",
    )
    log = pool.log()
    assert f"died with {CHILDREN} workers; handing back what they held" in log, log
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(n))  # none lost
    again = sorted(i for i, times in ran.items() if times > 1)
    # only the job each child was running when it died runs again
    assert len(again) <= CHILDREN and max(ran.values()) <= 2, (again, log)
    assert app.stats("q")["dead"] == 0
    assert time.monotonic() - restarted < 10
