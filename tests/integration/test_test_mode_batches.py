"""Batches in fastq's test mode, as a user's own tests use them: app.stub() and
app.eager() with no Redis at all (the app's URL is a port nothing listens on, so any
Redis call would fail); the counts, states and callbacks of the real thing."""

from __future__ import annotations

from typing import Any

import pytest

import fastq

NO_REDIS = "redis://127.0.0.1:1/0"


class Shop:
    """An app with a mailer (send: n < 0 raises, n == 0 returns Fail) and the two
    callbacks of a batch, which record (kind, status)."""

    def __init__(self) -> None:
        self.app = app = fastq.App(NO_REDIS)
        self.sent: list[int] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []

        @app.job(queue="mail")
        def send(n: int) -> Any:
            if n < 0:
                raise RuntimeError(f"bounced {n}")
            if n == 0:
                return fastq.Fail("no address")
            self.sent.append(n)
            return n

        @app.job(queue="reports")
        def report(status: dict[str, Any]) -> None:
            self.calls.append(("complete", status))

        @app.job(queue="reports")
        def notify(status: dict[str, Any]) -> None:
            self.calls.append(("success", status))

        self.send, self.report, self.notify = send, report, notify

    def kinds(self) -> list[tuple[str, str]]:
        return [(kind, status["id"]) for kind, status in self.calls]


def _counts(status: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return status["total"], status["done"], status["failed"], status["dead"], status["cancelled"]


def _state(app: fastq.App, batch_id: str) -> tuple[str, int, int, int, int, int, int]:
    s = app.batch_status(batch_id)
    assert s is not None
    return s.state, s.total, s.pending, s.done, s.failed, s.dead, s.cancelled


def test_stub_keeps_a_batchs_jobs_and_its_callbacks_once_they_have_run() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(
            on_complete=shop.report, on_success="notify", description="spring", meta={"n": 42}
        ) as batch:
            shop.send.enqueue(1)
            shop.send.enqueue_many([(2,), (3,)])
            assert _state(app, batch.id) == ("open", 3, 3, 0, 0, 0, 0)
        shop.send.enqueue(4)  # outside the block: no batch's
        assert [(j.args, j.batch) for j in jobs] == [
            ([1], batch.id),
            ([2], batch.id),
            ([3], batch.id),
            ([4], None),
        ]
        status = app.batch_status(batch.id)
        assert status is not None
        assert (status.state, status.total, status.pending) == ("closed", 3, 3)
        assert (status.queues, status.callbacks) == (
            ["mail"],
            {"complete": "report", "success": "notify"},
        )
        assert status.closed_at is not None and status.ended_at is None
        assert shop.calls == []

        results = jobs.run()  # the jobs, then the callbacks they enqueued, in turn
        assert results == [1, 2, 3, 4, None, None]
        assert shop.kinds() == [("complete", batch.id), ("success", batch.id)]
        assert _state(app, batch.id) == ("ended", 3, 0, 3, 0, 0, 0)
        assert app.batch_status(batch.id).succeeded  # type: ignore[union-attr]
        got = shop.calls[0][1]
        assert got == shop.calls[1][1]
        assert _counts(got) == (3, 3, 0, 0, 0)
        assert (got["id"], got["description"], got["meta"]) == (batch.id, "spring", {"n": 42})
        assert got["cancelled_at"] is None
        assert got["started_at"] <= got["ended_at"]
        assert jobs.run() == [] and len(shop.calls) == 2  # once


def test_stub_keeps_the_callbacks_under_the_batchs_ids_for_the_next_run() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(on_complete="report", on_success="notify") as batch:
            shop.send.enqueue(1)
        job = jobs.jobs.pop(0)  # run by hand, one at a time
        jobs.run_one(job)
        assert [(j.id, j.name, j.queue, j.batch) for j in jobs] == [
            (f"{batch.id}.complete", "report", "reports", None),
            (f"{batch.id}.success", "notify", "reports", None),
        ]
        assert jobs[0].args[0]["done"] == 1
        assert shop.calls == []  # kept, not run


def test_stub_counts_a_job_that_raises_or_fails_dead_and_runs_on_complete_only() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(on_complete="report", on_success="notify") as batch:
            shop.send.enqueue_many([(1,), (-1,), (0,), (2,)])
        with pytest.raises(RuntimeError, match="bounced -1"):
            jobs.run()  # the jobs after it stay kept
        assert _state(app, batch.id) == ("closed", 4, 2, 1, 1, 1, 0)
        assert len(jobs) == 2
        results = jobs.run()  # a returned Fail is dead at once, and returned, not raised
        assert isinstance(results[0], fastq.Fail) and results[1:] == [2, None]
        assert _state(app, batch.id) == ("ended", 4, 0, 2, 2, 2, 0)
        assert shop.kinds() == [("complete", batch.id)]
        assert _counts(shop.calls[0][1]) == (4, 2, 2, 2, 0)
        assert not app.batch_status(batch.id).succeeded  # type: ignore[union-attr]


def test_stub_cancel_drops_the_batchs_kept_jobs_and_counts_them_cancelled() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(on_complete="report", on_success="notify") as batch:
            shop.send.enqueue_many([(1,), (2,), (3,)])
        with app.batch(on_complete="report") as other:
            shop.send.enqueue(4)
        shop.send.enqueue(5)
        jobs.run_one(jobs.jobs.pop(0))  # 1 ran
        assert app.cancel_batch(batch.id) == 2
        # its on_complete is kept already: the batch ended with the cancel
        assert [(j.name, j.batch) for j in jobs] == [
            ("send", other.id),
            ("send", None),
            ("report", None),
        ]
        status = app.batch_status(batch.id)
        assert status is not None
        assert (status.state, status.total, status.done, status.cancelled) == ("ended", 3, 1, 2)
        assert status.cancelled_at is not None
        assert app.cancel_batch(batch.id) == 0  # an ended batch is left as it is
        jobs.run()
        assert shop.kinds() == [("complete", batch.id), ("complete", other.id)]
        got = shop.calls[0][1]
        assert _counts(got) == (3, 1, 0, 0, 2)
        assert got["cancelled_at"] == status.cancelled_at
        assert shop.sent == [1, 4, 5]


def test_stub_cancel_of_a_batch_whose_jobs_are_running_waits_for_them() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:

        @app.job(queue="mail")
        def stop(batch_id: str) -> None:
            assert app.cancel_batch(batch_id) == 1  # the job after it; not itself
            assert _state(app, batch_id) == ("cancelled", 3, 1, 1, 0, 0, 1)
            with pytest.raises(fastq.BatchClosed, match="is cancelled"):
                app.batch(id=batch_id)

        with app.batch(on_complete="report", close=False) as batch:
            shop.send.enqueue(1)
            stop.enqueue(batch.id)
            shop.send.enqueue(2)
        assert _state(app, batch.id) == ("open", 3, 3, 0, 0, 0, 0)
        jobs.run()
        assert _state(app, batch.id) == ("ended", 3, 0, 2, 0, 0, 1)
        assert shop.kinds() == [("complete", batch.id)]


def test_stub_campaign_of_blasts_counts_each_blast_and_ends_after_the_last() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(on_complete="report", on_success="notify") as campaign:
            with app.batch(on_complete="report", on_success="notify") as blast1:
                shop.send.enqueue_many([(1,), (2,)])
            with app.batch(on_complete="report") as blast2:
                shop.send.enqueue_many([(-3,), (4,)])
            shop.send.enqueue(5)  # a job of the campaign's own
        status = app.batch_status(campaign.id)
        assert status is not None
        assert (status.state, status.total, status.children) == (
            "closed",
            5,
            sorted([blast1.id, blast2.id]),
        )
        assert app.batch_status(blast1.id).parent == campaign.id  # type: ignore[union-attr]
        with pytest.raises(RuntimeError, match="bounced -3"):
            jobs.run()
        jobs.run()
        assert shop.kinds() == [
            ("complete", blast1.id),
            ("success", blast1.id),
            ("complete", blast2.id),
            ("complete", campaign.id),
        ]
        by_id = {status["id"]: status for _, status in shop.calls}
        assert _counts(by_id[blast1.id]) == (2, 2, 0, 0, 0)
        assert _counts(by_id[blast2.id]) == (2, 1, 1, 1, 0)
        assert _counts(by_id[campaign.id]) == (5, 4, 1, 1, 0)
        assert _state(app, campaign.id) == ("ended", 5, 0, 4, 1, 1, 0)


def test_stub_cancelling_a_campaign_cancels_its_blasts() -> None:
    shop = Shop()
    app = shop.app
    with app.stub() as jobs:
        with app.batch(on_complete="report") as campaign:
            with app.batch(on_complete="report") as blast:
                shop.send.enqueue_many([(1,), (2,)])
            shop.send.enqueue(3)
        assert app.cancel_batch(campaign.id) == 3
        assert len(jobs) == 2  # the two on_complete callbacks
        jobs.run()
        assert shop.kinds() == [("complete", blast.id), ("complete", campaign.id)]
        assert _counts(shop.calls[1][1]) == (3, 0, 0, 0, 3)
        assert _state(app, blast.id) == ("ended", 2, 0, 0, 0, 0, 2)
        assert shop.sent == []


def test_eager_counts_each_job_as_it_runs_and_runs_the_callbacks_at_close() -> None:
    shop = Shop()
    app = shop.app
    with app.eager() as jobs:
        with app.batch(on_complete="report", on_success="notify") as batch:
            shop.send.enqueue_many([(1,), (2,)])
            assert shop.sent == [1, 2]
            assert _state(app, batch.id) == ("open", 2, 0, 2, 0, 0, 0)
            assert shop.calls == []
        assert shop.kinds() == [("complete", batch.id), ("success", batch.id)]
        assert _counts(shop.calls[0][1]) == (2, 2, 0, 0, 0)
        assert _state(app, batch.id) == ("ended", 2, 0, 2, 0, 0, 0)
        assert len(jobs) == 0


def test_eager_propagates_a_jobs_error_and_counts_it_dead() -> None:
    shop = Shop()
    app = shop.app
    with app.eager():
        with app.batch(on_complete="report", on_success="notify") as batch:
            shop.send.enqueue(1)
            with pytest.raises(RuntimeError, match="bounced -2"):
                shop.send.enqueue(-2)
        assert shop.kinds() == [("complete", batch.id)]
        assert _counts(shop.calls[0][1]) == (2, 1, 1, 1, 0)
        # a block that raises leaves its batch open, as with Redis
        with pytest.raises(RuntimeError, match="bounced -3"), app.batch(on_complete="report") as b:
            shop.send.enqueue(-3)
        assert _state(app, b.id) == ("open", 1, 0, 0, 1, 1, 0)
        app.close_batch(b.id)
        assert shop.kinds()[-1] == ("complete", b.id)


def test_eager_campaign_and_cancel() -> None:
    shop = Shop()
    app = shop.app
    with app.eager():
        with app.batch(on_complete="report", on_success="notify") as campaign:
            with app.batch(on_complete="report", on_success="notify") as blast:
                shop.send.enqueue(1)
            assert shop.kinds() == [("complete", blast.id), ("success", blast.id)]
            shop.send.enqueue(2)
        assert shop.kinds()[2:] == [("complete", campaign.id), ("success", campaign.id)]
        assert _counts(shop.calls[2][1]) == (2, 2, 0, 0, 0)
        shop.calls.clear()
        with app.batch(on_complete="report", on_success="notify", close=False) as batch:
            shop.send.enqueue(3)
        assert app.cancel_batch(batch.id) == 0  # nothing waits: every job ran
        assert shop.kinds() == [("complete", batch.id)]
        assert shop.calls[0][1]["cancelled_at"] is not None


def test_jobs_a_batchs_job_enqueues_join_no_batch() -> None:
    shop = Shop()
    app = shop.app

    @app.job(queue="mail")
    def fan_out() -> None:
        shop.send.enqueue(9)

    with app.stub() as jobs:
        with app.batch(on_complete="report") as batch:
            fan_out.enqueue()
        jobs.run()
    assert shop.sent == [9]
    assert _counts(shop.calls[0][1]) == (1, 1, 0, 0, 0)
    with app.eager():
        with app.batch(on_complete="report") as batch:
            fan_out.enqueue()
        assert _state(app, batch.id) == ("ended", 1, 0, 1, 0, 0, 0)


def test_closed_batches_refuse_jobs_and_status_reads_from_memory() -> None:
    shop = Shop()
    app = shop.app

    @app.job(queue="reports")
    def two(a: int, b: int) -> None: ...

    with app.stub():
        assert app.batch_status("nope") is None
        with pytest.raises(fastq.BatchClosed, match="'nope' does not exist"):
            app.close_batch("nope")
        with pytest.raises(TypeError, match="on_success 'two' must take one argument"):
            app.batch(on_success=two)  # refused when it opens, as with Redis
        with app.batch(id="blast-1", close=False, description="one") as batch:
            shop.send.enqueue(1)
        with app.batch(id="blast-1") as again:  # joined by its id, closed on leaving
            shop.send.enqueue(2)
        assert again.id == batch.id and _state(app, "blast-1") == ("closed", 2, 2, 0, 0, 0, 0)
        with pytest.raises(fastq.BatchClosed, match="'blast-1' is closed"):
            app.batch(id="blast-1")
        with pytest.raises(fastq.BatchClosed, match="'blast-1' is closed"), batch:
            shop.send.enqueue(3)
        with app.batch(description="two", close=False):
            pass
        with app.batch() as empty:
            pass  # no job: it ends as it closes
        with pytest.raises(fastq.BatchClosed, match="is ended"), empty:
            shop.send.enqueue(4)
        assert app.batch_status(empty.id).total == 0  # type: ignore[union-attr]
        assert [s.description for s in app.list_batches()] == ["", "two", "one"]
        assert [s.description for s in app.list_batches(limit=2)] == ["", "two"]


def test_a_batch_opened_outside_the_test_mode_is_refused() -> None:
    shop = Shop()
    app = shop.app
    outside = fastq.Batch(app.batch_book, "real", close=False)  # as if opened in Redis
    with outside, app.stub(), pytest.raises(RuntimeError, match="opened outside this test mode"):
        shop.send.enqueue(1)


def test_the_real_batch_book_is_back_after_the_block() -> None:
    shop = Shop()
    app = shop.app
    book = app.batch_book
    with app.stub():
        assert app.batch_book is not book
    assert app.batch_book is book
    with pytest.raises(fastq.RedisUnavailable):
        app.batch_status("x")
