"""App.waiting_jobs (the dashboard's ready and scheduled listings) and App.retry_job
(its retry of one dead or broken job), on a plain and a sharded queue."""

from __future__ import annotations

import pytest
import redis

import fastq


def test_ready_jobs_page_in_claim_order_priority_first(app: fastq.App) -> None:
    ids = app.enqueue_many("send", [(i,) for i in range(7)], queue="w")
    urgent = app.enqueue("send", args=[99], queue="w", priority=5)
    first = app.waiting_jobs("w", "queued", 0, 3)
    assert [j.id for j in first] == [urgent, ids[0], ids[1]]
    assert (first[0].name, first[0].args, first[0].state) == ("send", [99], "queued")
    rest = app.waiting_jobs("w", "queued", 3, 50)
    assert [j.id for j in rest] == ids[2:]
    assert app.waiting_jobs("w", "queued", 8, 50) == []


def test_scheduled_jobs_page_soonest_first(app: fastq.App) -> None:
    late = app.enqueue("send", args=[1], queue="w", delay_s=600)
    soon = app.enqueue("send", args=[2], queue="w", delay_s=60)
    jobs = app.waiting_jobs("w", "scheduled")
    assert [j.id for j in jobs] == [soon, late]
    assert jobs[0].due_at is not None and jobs[0].due_at < jobs[1].due_at  # type: ignore[operator]


def test_a_sharded_queues_shards_page_one_after_the_other(app: fastq.App) -> None:
    app.declare_queue("sw", shards=3)
    ids = app.enqueue_many("send", [(i,) for i in range(30)], queue="sw")
    pages = [app.waiting_jobs("sw", "queued", offset, 7) for offset in range(0, 35, 7)]
    seen = [j.id for page in pages for j in page]
    assert sorted(seen) == sorted(ids) and len(seen) == 30
    assert all(j.queue == "sw" for page in pages for j in page)


@pytest.mark.parametrize("bad", [{"state": "dead"}, {"limit": 501}, {"limit": 0}, {"offset": -1}])
def test_waiting_jobs_refuses_what_it_cannot_list(app: fastq.App, bad: dict) -> None:
    app.declare_queue("w")
    with pytest.raises(ValueError, match="waiting_jobs"):
        app.waiting_jobs("w", **bad)


def test_retry_job_puts_back_one_dead_job(app: fastq.App, r: redis.Redis) -> None:
    app.declare_queue("w")
    keys = app.keys("w")
    job_id = app.enqueue("send", args=[1], queue="w")
    other = app.enqueue("send", args=[2], queue="w")
    for i in (job_id, other):  # as a worker buries them: out of the ready list, dead
        r.lrem(keys.ready, 0, i)
        r.zadd(keys.dead, {i: 1000})
    assert app.retry_job(job_id, "w") is True
    assert app.retry_job(job_id, "w") is False  # queued again: not dead any more
    info = app.get_job(job_id)
    assert info is not None and info.state == "queued"
    assert app.stats("w")["dead"] == 1  # the other stays dead
    assert app.retry_job("nosuchjob") is False
