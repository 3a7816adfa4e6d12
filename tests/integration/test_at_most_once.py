"""At-most-once jobs end to end, with an in-process worker on a real redis-server:
each runs once at most, is never retried, and a stop hands back only those that
never started. (SIGKILL and SIGTERM of a real pool: tests/fault/test_at_most_once_pool.py.)"""

from __future__ import annotations

import logging

import orjson
import pytest
import redis
from conftest import drain

import fastq
from fastq.policy import Delivery
from fastq.worker.roundtrip import RoundTrip
from fastq.worker.worker import HardStop, Worker


def burst_worker(app: fastq.App, **options: object) -> Worker:
    return Worker(app, ["q"], burst=True, handle_signals=False, **options)  # type: ignore[arg-type]


def held_and_envelopes(app: fastq.App, r: redis.Redis) -> tuple[int, int]:
    k = app.keys("q")
    return app.stats("q")["inflight"], r.hlen(k.jobs)


def test_at_most_once_jobs_run_once_and_count_as_processed(app: fastq.App, r: redis.Redis) -> None:
    ran: list[int] = []

    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        ran.append(i)

    @app.job(queue="q")
    def plain(i: int) -> None:
        ran.append(-i)

    assert once.delivery is Delivery.AT_MOST_ONCE and plain.delivery is Delivery.AT_LEAST_ONCE
    # interleaved in one queue: they run in their order, batch after batch
    for i in range(1, 151):
        once.enqueue(i)
        plain.enqueue(i)
    drain(app, ["q"], batch_size=40)
    assert ran == [x for i in range(1, 151) for x in (i, -i)]
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["failed"], stats["dead"]) == (300, 0, 0, 0)
    assert held_and_envelopes(app, r) == (0, 0)


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        ("raise", "ValueError: boom"),
        ("retry", "Retry requested: an at-most-once job is never retried"),
        ("fail", "Fail: no"),
    ],
)
def test_a_failing_at_most_once_job_is_buried_not_retried(
    app: fastq.App, r: redis.Redis, outcome: str, error: str
) -> None:
    runs: list[str] = []

    @app.job(queue="q", delivery="at_most_once", retries=5)
    def once(how: str) -> object:
        runs.append(how)
        if how == "raise":
            raise ValueError("boom")
        return fastq.Retry(delay_s=0) if how == "retry" else fastq.Fail("no")

    # an envelope's own retries do not bring an attempt back either
    job_id = once.enqueue_with(retries=3)(outcome)
    drain(app, ["q"])
    assert runs == [outcome]
    stats = app.stats("q")
    failed = 0 if outcome == "retry" else 1
    assert (stats["processed"], stats["failed"], stats["retried"]) == (0, failed, 0)
    assert (stats["dead"], stats["total_dead"], stats["scheduled"]) == (1, 1, 0)
    info = app.get_job(job_id)
    assert info is not None and info.state == "dead" and info.last_error == error
    assert info.args == [outcome] and info.attempts == 1
    assert app.stats("q")["inflight"] == 0


def test_arguments_that_do_not_fit_quarantine_it_with_its_payload(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        pass

    job_id = once.enqueue(1)
    k = app.keys("q")
    env = orjson.loads(r.hget(k.jobs, job_id))
    env[1] = [1, 2, 3]  # as a producer in another language might write it
    r.hset(k.jobs, job_id, orjson.dumps(env))
    drain(app, ["q"])
    info = app.get_job(job_id)
    assert info is not None and info.state == "broken" and info.args == [1, 2, 3]
    assert info.broken_reason is not None and "arguments do not fit once" in info.broken_reason
    assert (app.stats("q")["broken"], app.stats("q")["total_broken"]) == (1, 1)


def test_a_graceful_stop_hands_back_the_taken_jobs_not_started(
    app: fastq.App, r: redis.Redis
) -> None:
    ran: list[int] = []
    worker = burst_worker(app)

    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        ran.append(i)
        if i == 1:
            worker.stop()  # as a SIGTERM would, mid-batch

    once.enqueue_many([(i,) for i in range(6)])
    worker.run()
    assert ran == [0, 1]
    k = app.keys("q")
    assert app.stats("q")["processed"] == 2
    # 2..5 never started: those taken are handed back to the front with their
    # payloads, ahead of those prefetched, in their order
    front_first = r.lrange(k.ready, 0, -1)[::-1]
    assert [orjson.loads(r.hget(k.jobs, i))[1] for i in front_first] == [[2], [3], [4], [5]]
    drain(app, ["q"])
    assert ran == [0, 1, 2, 3, 4, 5]
    assert app.stats("q")["processed"] == 6 and held_and_envelopes(app, r) == (0, 0)


def test_a_hard_stop_does_not_run_the_job_in_hand_again(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        ran.append(i)
        if i == 1 and ran.count(1) == 1:
            raise HardStop("SIGTERM")  # the operator's second signal, mid-job

    once.enqueue_many([(i,) for i in range(5)])
    with caplog.at_level(logging.WARNING, logger="fastq.worker"):
        burst_worker(app).run()
    assert ran == [0, 1]
    assert "was interrupted; it is not run again" in caplog.text
    assert app.stats("q")["ready"] == 3  # 2, 3, 4: never started
    drain(app, ["q"])
    assert ran == [0, 1, 2, 3, 4]  # 1 ran once: it is gone
    stats = app.stats("q")
    assert (stats["processed"], stats["interrupted"], stats["stalled"]) == (4, 0, 0)
    assert held_and_envelopes(app, r) == (0, 0)


def test_a_take_that_fails_runs_nothing_at_most_once_and_hands_it_back(
    app: fastq.App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    @app.job(queue="q", delivery="at_most_once")
    def once(i: int) -> None:
        ran.append(f"once{i}")

    @app.job(queue="q")
    def plain(i: int) -> None:
        ran.append(f"plain{i}")

    once.enqueue(1)
    plain.enqueue(2)
    once.enqueue(3)
    real_take = RoundTrip.take
    calls: list[list[bytes]] = []

    def take_once_lost(self: RoundTrip, queue: str, ids: list[bytes]) -> list[bytes]:
        calls.append(ids)
        if len(calls) == 1:
            raise redis.ConnectionError("the connection dropped")
        return real_take(self, queue, ids)

    monkeypatch.setattr(RoundTrip, "take", take_once_lost)
    worker = burst_worker(app, batch_size=10)
    worker.sizers["q"].n = 10  # the three in one batch
    worker.run()
    # the first batch ran its plain job only; its at-most-once jobs went back unstarted
    assert ran == ["plain2", "once1", "once3"]
    assert len(calls) == 2 and len(calls[0]) == 2 and app.stats("q")["processed"] == 3
    assert held_and_envelopes(app, r) == (0, 0)


def test_a_worker_without_at_most_once_jobs_never_takes(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.job(queue="q")
    def plain() -> None:
        pass

    def no_take(self: RoundTrip, queue: str, ids: list[bytes]) -> list[bytes]:
        raise AssertionError("took at-least-once jobs")

    monkeypatch.setattr(RoundTrip, "take", no_take)
    plain.enqueue()
    worker = drain(app, ["q"])
    assert worker._at_most_once is None and app.stats("q")["processed"] == 1


@pytest.mark.parametrize(
    ("delivery", "exc"),
    [("sometimes", ValueError), ("AT_MOST_ONCE", ValueError), (1, TypeError), (None, TypeError)],
)
def test_delivery_is_checked_at_registration(app: fastq.App, delivery: object, exc: type) -> None:
    with pytest.raises(exc, match="delivery must be 'at_least_once' or 'at_most_once'"):
        app.job(queue="q", delivery=delivery)(lambda: None)  # type: ignore[arg-type]
    assert app.registry == {}


def test_retry_options_are_refused_for_an_at_most_once_job(app: fastq.App) -> None:
    with pytest.raises(ValueError, match="never retried: backoff_s, retry_delays_s would never"):
        app.job(delivery="at_most_once", backoff_s=1, retry_delays_s=[1])(lambda: None)
    with pytest.raises(ValueError, match="never retried: retry would never apply"):
        app.job(delivery="at_most_once", retry=fastq.Delays([1]))(lambda: None)
    assert app.registry == {}


def test_a_rate_key_is_refused_for_an_at_most_once_job(app: fastq.App) -> None:
    def send(account: str) -> None:
        pass

    with pytest.raises(ValueError, match="rate_key= cannot apply to an at-most-once job"):
        app.job(delivery="at_most_once", rate_key="smtp:{account}", rate=5)(send)
    assert app.registry == {}


def test_a_taken_at_most_once_job_leaves_its_tags_and_its_unique_lock(
    app: fastq.App, r: redis.Redis
) -> None:
    seen: list[tuple[list[str], str]] = []

    @app.job(queue="q", delivery="at_most_once", unique_for_s=600)
    def once(i: int) -> None:
        if i == 1:  # taken: nothing in Redis follows it any more, so a copy may wait
            tagged = [job.id for job in app.jobs_by_tag("blast", queue="q").jobs]
            seen.append((tagged, once.enqueue_with(unique_key="k")(2)))

    first = once.enqueue_with(tags=["blast"], unique_key="k")(1)
    assert once.enqueue_with(unique_key="k")(1) == first  # locked while it waits
    drain(app, ["q"])
    ((tagged, second),) = seen
    assert tagged == [] and second != first
    k = app.keys("q")
    assert (r.hlen(k.links), r.zcard(k.tagged), r.hlen(k.unique)) == (0, 0, 0)
    assert app.stats("q")["processed"] == 2
