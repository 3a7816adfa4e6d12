"""Every job leaves a record, with real pools: the retry of a partial blast that the
README documents adds nothing twice, and a cancel in the middle of a drain reports
counts that add up."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import pytest
import redis

import fastq
from tests.support.pool import Pool, noted_runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240)]


def _ran(pool: Pool) -> Counter[int]:
    return noted_runs(pool)


def test_a_partial_blast_drained_then_retried_as_documented_runs_every_job_once(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 30_000
    calls = [(i,) for i in range(n)]
    app.declare_queue("q")
    # Redis nearly full: room for part of the blast only
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", used + (2 << 20))
    with pytest.raises(fastq.EnqueueError) as info:
        app.enqueue_many("note", calls, queue="q")
    exc = info.value
    assert exc.fault == "out of memory" and 0 < len(exc.written) < n, len(exc.written)
    # a worker drains what went in, over maxmemory (acks may, and write the records)
    pool = pools("-c", "2")
    wait_until(lambda: sum(_ran(pool).values()) >= len(exc.written), 120, "the first drain")
    wait_until(lambda: app.stats("q")["processed"] == len(exc.written), 30, "the acks")
    # room again, and the retry the README and the exception give
    r.config_set("maxmemory", 0)
    assert app.enqueue_many("note", calls, job_ids=exc.ids, queue="q") == exc.ids
    wait_until(lambda: app.stats("q")["processed"] >= n, 120, "the second drain")
    # the acks logged the done records a batch at a time; the pool's reaper folds
    # them into one record per job, a few thousand a call, until none is left
    k = app.keys("q")
    logged = lambda: r.hexists(k.records, "fastq:s") or r.hexists(k.records_old, "fastq:s")  # noqa: E731
    wait_until(lambda: not logged(), 60, "the reaper's fold")
    assert pool.stop() == 0, pool.log()
    ran = _ran(pool)
    assert set(ran) == set(range(n)) and set(ran.values()) == {1}, Counter(ran.values())
    stats = app.stats("q")
    assert (stats["enqueued"], stats["processed"], stats["ready"]) == (n, n, 0)
    # each job answers from its record
    first = app.get_job(exc.written[0], queue="q")
    assert first is not None and first.state == "done" and first.worker is not None


def test_cancel_by_tag_mid_drain_reports_counts_that_add_up(
    app: fastq.App, pools: Callable[..., Pool]
) -> None:
    n = 5000
    app.declare_queue("q")
    # 2 ms each: the 500th run comes long before the last, so the cancel stops many
    app.enqueue_many("note", [(i, 0.002) for i in range(n)], queue="q", tags=["campaign"])
    pool = pools("-c", "2")
    wait_until(lambda: sum(_ran(pool).values()) >= 500, 60, "500 runs")
    cancelled = app.cancel_by_tag("campaign", queue="q")
    wait_until(
        lambda: app.stats("q")["inflight"] == 0 and app.stats("q")["ready"] == 0, 60, "the drain"
    )
    assert pool.stop() == 0, pool.log()
    ran = _ran(pool)
    stats = app.stats("q")
    assert set(ran.values()) == {1}  # none ran twice
    # stopped never ran; the others (those held at the cancel too) ran once
    assert cancelled.stopped + len(ran) == n and cancelled.stopped > 0
    assert stats["cancelled"] == cancelled.stopped
    assert stats["processed"] == len(ran) >= 500
    assert len(app.recent_jobs("q", "cancelled", limit=n)) == cancelled.stopped
    assert len(app.recent_jobs("q", "done", limit=n)) == len(ran)
