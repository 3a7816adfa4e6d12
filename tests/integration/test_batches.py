"""Batches end to end: an in-process worker on a real redis-server runs the jobs, and
the batch's callbacks, once, with the counts of what happened."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
import redis

import fastq
from fastq.producer.batches import KEEP_MS
from fastq.protocol.contracts import CLAIM
from fastq.protocol.keys import BatchKeys
from tests.support.workers import drain


def _app_with_callbacks(app: fastq.App) -> list[tuple[str, dict[str, Any]]]:
    """Registers report (on_complete) and notify (on_success) on queue 'reports';
    returns the list they append (kind, status) to."""
    calls: list[tuple[str, dict[str, Any]]] = []

    @app.job(queue="reports")
    def report(status: dict[str, Any]) -> None:
        calls.append(("complete", status))

    @app.job(queue="reports")
    def notify(status: dict[str, Any]) -> None:
        calls.append(("success", status))

    return calls


def _counts(status: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return status["total"], status["done"], status["failed"], status["dead"], status["cancelled"]


def test_a_blast_with_failures_runs_on_complete_once_with_true_counts(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)
    runs: dict[int, int] = {}

    @app.job(queue="mail", retries=0)
    def send(i: int) -> None:
        runs[i] = runs.get(i, 0) + 1
        if i % 10 == 0:
            raise fastq.Fail("bounced")

    with app.batch(on_complete="report", on_success="notify", description="campaign 42") as b:
        send.enqueue_many([(i,) for i in range(150)])
        send.enqueue(1000)  # several calls join it
    status = app.batch_status(b.id)
    assert status is not None
    assert (status.state, status.total, status.pending, status.done) == ("closed", 151, 151, 0)
    assert calls == []
    drain(app, ["mail"])
    drain(app, ["reports"])
    assert [kind for kind, _ in calls] == ["complete"]
    got = calls[0][1]
    assert _counts(got) == (151, 135, 16, 16, 0)
    assert (got["id"], got["description"]) == (b.id, "campaign 42")
    status = app.batch_status(b.id)
    assert status is not None
    assert (status.state, status.pending, status.done, status.dead) == ("ended", 0, 135, 16)
    assert status.ended_at is not None and status.started_at is not None
    assert status.ended_at >= status.started_at
    assert not status.succeeded
    # the success callback was never enqueued
    assert app.get_job(f"{b.id}.success") is None
    assert app.get_job(f"{b.id}.complete").state == "done"  # type: ignore[union-attr]
    assert runs == {i: 1 for i in [*range(150), 1000]}


def test_every_job_done_runs_both_callbacks_once(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)

    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch(on_complete="report", on_success="notify", meta={"campaign": 42}) as b:
        send.enqueue_many([(i,) for i in range(40)])
    drain(app, ["mail"])
    drain(app, ["reports"])
    assert sorted(kind for kind, _ in calls) == ["complete", "success"]
    assert all(_counts(s) == (40, 40, 0, 0, 0) for _, s in calls)
    assert all(s["meta"] == {"campaign": 42} for _, s in calls)
    assert app.batch_status(b.id).succeeded  # type: ignore[union-attr]
    # settling again changes nothing: the callbacks stay enqueued once
    app.batch_book.resume(app.redis, ["mail"])
    app.close_batch(b.id)
    drain(app, ["reports"])
    assert len(calls) == 2


def test_a_retry_counts_once_at_its_end(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)
    tries: dict[int, int] = {}

    @app.job(queue="mail", retries=3, backoff_s=0.01, jitter=0.0)
    def flaky(i: int) -> None:
        tries[i] = tries.get(i, 0) + 1
        if tries[i] < 3 and i < 5:
            raise RuntimeError("try again")

    with app.batch(on_complete="report", on_success="notify") as b:
        flaky.enqueue_many([(i,) for i in range(20)])
    deadline = time.monotonic() + 10
    while app.batch_status(b.id).state != "ended":  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        drain(app, ["mail"])
    drain(app, ["reports"])
    assert sorted(kind for kind, _ in calls) == ["complete", "success"]
    # 5 jobs failed twice each and then succeeded: done 20, failed 5 (each job once)
    assert _counts(calls[0][1]) == (20, 20, 5, 0, 0)
    assert sum(tries.values()) == 30


def test_an_empty_batch_ends_as_it_closes(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)
    with app.batch(on_complete="report", on_success="notify") as b:
        pass
    assert app.batch_status(b.id).state == "ended"  # type: ignore[union-attr]
    drain(app, ["reports"])
    assert sorted(kind for kind, _ in calls) == ["complete", "success"]
    assert _counts(calls[0][1]) == (0, 0, 0, 0, 0)


def test_jobs_join_from_several_queues_and_processes_by_id(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)

    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    @app.job(queue="sms")
    def text(i: int) -> None:
        pass

    with app.batch(on_complete="report", close=False) as b:
        send.enqueue_many([(i,) for i in range(30)])
    # another producer (here: another App on the same Redis) joins it by its id
    other = fastq.App(app.redis_url, namespace=app.namespace)
    try:
        with other.batch(id=b.id, close=False):
            other.enqueue("text", [1], queue="sms")
            other.enqueue_many("text", [(i,) for i in range(9)], queue="sms")
    finally:
        other.close()
    drain(app, ["mail", "sms"])
    status = app.batch_status(b.id)
    assert status is not None
    assert (status.state, status.total, status.done, status.queues) == (
        "open",
        40,
        40,
        ["mail", "sms"],
    )
    drain(app, ["reports"])
    assert calls == []  # not closed: more may come
    app.close_batch(b.id)
    drain(app, ["reports"])
    assert [kind for kind, _ in calls] == ["complete"]
    assert _counts(calls[0][1]) == (40, 40, 0, 0, 0)


def test_no_job_joins_a_closed_batch(app: fastq.App) -> None:
    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch() as b:
        send.enqueue(1)
    with pytest.raises(fastq.BatchClosed, match="is closed"), app.batch(id=b.id):
        pass
    with pytest.raises(fastq.BatchClosed, match="does not exist"):
        app.close_batch("no-such-batch")
    assert app.batch_status("no-such-batch") is None
    # a process that joined before the close is refused by the script itself
    batch = fastq.Batch(app.batch_book, b.id, close=False)
    batch._joined.add("mail")
    with batch, pytest.raises(fastq.BatchClosed, match=f"batch .{b.id}. is closed"):
        send.enqueue_many([(2,), (3,)])
    assert app.stats("mail")["ready"] == 1


def test_cancel_stops_the_waiting_jobs_and_the_callback_sees_it(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)
    ran: list[int] = []

    @app.job(queue="mail")
    def send(i: int) -> None:
        ran.append(i)

    with app.batch(on_complete="report", on_success="notify") as b:
        send.enqueue_many([(i,) for i in range(50)])
        send.enqueue_with(delay_s=60)(99)  # a scheduled one is waiting too
    drain(app, ["mail"], max_jobs=10, batch_size=10)
    n = len(ran)
    assert 10 <= n < 50
    assert app.cancel_batch(b.id) == 51 - n
    drain(app, ["mail"])
    assert len(ran) == n
    drain(app, ["reports"])
    assert [kind for kind, _ in calls] == ["complete"]
    got = calls[0][1]
    assert _counts(got) == (51, n, 0, 0, 51 - n)
    assert got["cancelled_at"] is not None
    status = app.batch_status(b.id)
    assert status is not None and (status.state, status.cancelled) == ("ended", 51 - n)
    with pytest.raises(fastq.BatchClosed), app.batch(id=b.id):
        pass


def test_a_campaign_of_blasts_ends_after_its_last_blast(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)

    @app.job(queue="mail", retries=0)
    def send(i: int) -> None:
        if i == 7:
            raise fastq.Fail("bounced")

    with app.batch(on_complete="report", description="campaign") as campaign:
        with app.batch(on_complete="report", description="blast 1") as one:
            send.enqueue_many([(i,) for i in range(10)])
        with app.batch(on_complete="report", description="blast 2") as two:
            send.enqueue_many([(i,) for i in range(20, 25)])
        send.enqueue(30)  # the campaign's own job
    status = app.batch_status(campaign.id)
    assert status is not None
    assert (status.total, status.children) == (16, sorted([one.id, two.id]))
    drain(app, ["mail"])
    drain(app, ["reports"])
    by_id = {s["id"]: s for _, s in calls}
    assert sorted(by_id) == sorted([campaign.id, one.id, two.id])
    assert _counts(by_id[one.id]) == (10, 9, 1, 1, 0)
    assert _counts(by_id[two.id]) == (5, 5, 0, 0, 0)
    assert _counts(by_id[campaign.id]) == (16, 15, 1, 1, 0)
    assert app.batch_status(one.id).parent == campaign.id  # type: ignore[union-attr]


def test_cancelling_a_campaign_cancels_its_blasts(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)

    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch(on_complete="report") as campaign:
        with app.batch(on_complete="report") as one:
            send.enqueue_many([(i,) for i in range(10)])
        send.enqueue_many([(i,) for i in range(3)])
    assert app.cancel_batch(campaign.id) == 13
    drain(app, ["mail", "reports"])
    by_id = {s["id"]: s for _, s in calls}
    assert _counts(by_id[one.id]) == (10, 0, 0, 0, 10)
    assert _counts(by_id[campaign.id]) == (13, 0, 0, 0, 13)


def test_the_reaper_settles_what_no_worker_told(app: fastq.App, r: redis.Redis) -> None:
    """A share that ended with no worker to tell the batch (the ack's reply lost)
    stays due in its queue, and a reaper's turn ends the batch."""
    calls = _app_with_callbacks(app)

    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch(on_complete="report") as b:
        send.enqueue_many([(i,) for i in range(5)])

    def lost(*_: object) -> None:
        raise redis.ConnectionError("the settle's connection dropped")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app.batch_book, "settle_shares", lost)
        drain(app, ["mail"])
    assert app.batch_status(b.id).state == "closed"  # type: ignore[union-attr]
    assert r.smembers(app.keys("mail").batches_due) == {b.id.encode()}
    app.batch_book.resume(app.redis, app.physical_queues())
    assert app.batch_status(b.id).state == "ended"  # type: ignore[union-attr]
    assert r.exists(app.keys("mail").batches_due) == 0
    assert r.hget(app.keys("mail").batches, b.id) is None  # its share went with it
    drain(app, ["reports"])
    assert len(calls) == 1


def test_an_ended_batch_expires_and_leaves_nothing_in_its_queues(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch() as b:
        send.enqueue_many([(i,) for i in range(5)])
    drain(app, ["mail"])
    ttl_ms = r.pttl(BatchKeys(app.namespace, b.id).batch)
    assert KEEP_MS - 60_000 < ttl_ms <= KEEP_MS
    k = app.keys("mail")
    assert r.exists(k.batched, k.batches, k.batches_due) == 0
    assert [s.id for s in app.list_batches()] == [b.id]


def test_a_callback_that_cannot_take_the_batch_is_refused_at_once(app: fastq.App) -> None:
    @app.job(queue="reports")
    def no_args() -> None:
        pass

    with pytest.raises(TypeError, match="on_complete 'no_args' must take one argument"):
        app.batch(on_complete=no_args)
    with pytest.raises(TypeError, match="on_success must be a job"):
        app.batch(on_success=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="holds no"):
        app.batch(id="a{b}")


def test_joining_a_batch_inside_another_one_keeps_its_own_parent(app: fastq.App) -> None:
    calls = _app_with_callbacks(app)

    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch(on_complete="report", close=False) as blast:
        send.enqueue(1)
    with app.batch(on_complete="report") as other:
        with app.batch(id=blast.id):  # joins it, and closes it: not other's child
            send.enqueue(2)
        send.enqueue(3)
    assert app.batch_status(other.id).children == []  # type: ignore[union-attr]
    assert app.batch_status(blast.id).parent is None  # type: ignore[union-attr]
    drain(app, ["mail"])
    drain(app, ["reports"])
    assert sorted(_counts(s) for _, s in calls) == [(1, 1, 0, 0, 0), (2, 2, 0, 0, 0)]


def test_joining_a_cancelled_batch_says_it_is_cancelled(app: fastq.App) -> None:
    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    with app.batch(close=False) as b:
        send.enqueue_many([(1,), (2,)])
    # a worker holds one of them: the cancel cannot stop it, the batch waits for it
    keys = app.keys("mail")
    CLAIM.call(app.redis, CLAIM.keys_for(keys, "w"), CLAIM.argv("w", 1, 60_000, 100))
    assert app.cancel_batch(b.id) == 1
    with pytest.raises(fastq.BatchClosed, match="is cancelled") as info, app.batch(id=b.id):
        pass
    assert info.value.state == "cancelled"
    assert app.batch_status(b.id).state == "cancelled"  # type: ignore[union-attr]


def test_a_batch_with_callbacks_leaves_its_callbacks_room(app: fastq.App) -> None:
    """A callback's id is '<batch>.complete', a job id (200 characters at most): a
    longer batch id with callbacks is refused at once, as is a meta over its bound,
    in Redis and in the test mode alike."""

    @app.job(queue="mail")
    def report(status: dict[str, Any]) -> None: ...

    for make in (lambda: contextlib.nullcontext(), app.stub):
        with make():
            with pytest.raises(ValueError, match="at most 191 characters, not 192"):
                app.batch(on_complete=report, id="b" * 192)
            with pytest.raises(ValueError, match="meta is too large"):
                app.batch(on_complete=report, meta="x" * 70_000)
            with app.batch(on_complete=report, id="b" * 191, close=False) as b:
                assert b.id == "b" * 191
