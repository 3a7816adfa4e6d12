"""What a producer sends is bounded and checked before anything reaches Redis, and a
blast into a Redis that fills up says which jobs went in."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import pytest
import redis

import fastq
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer, free_port
from tests.support.keys import namespace_keys

SENTINEL = "fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"
NAN, INF = float("nan"), float("inf")


@pytest.fixture
def send(app: fastq.App) -> fastq.JobDef[None]:
    @app.job(queue="q")
    def send(*args: Any, **kwargs: Any) -> None: ...

    return send


Attempt = Callable[[fastq.App, fastq.JobDef[None]], Any]

BAD: dict[str, tuple[type[Exception], Attempt]] = {
    # job ids
    "id-10000-chars": (ValueError, lambda a, j: j.enqueue_with(job_id="x" * 10_000)(1)),
    "id-201-bytes": (ValueError, lambda a, j: a.enqueue("send", [1], job_id="x" * 201)),
    "id-with-space": (ValueError, lambda a, j: a.enqueue("send", [1], job_id="a b")),
    "id-non-ascii": (ValueError, lambda a, j: a.enqueue("send", [1], job_id="caf\u00e9")),
    "id-sentinel": (ValueError, lambda a, j: a.enqueue("send", [1], job_id=SENTINEL)),
    "id-reserved": (ValueError, lambda a, j: j.enqueue_with(job_id="fastq:mine")(1)),
    "id-not-str": (TypeError, lambda a, j: a.enqueue("send", [1], job_id=7)),  # type: ignore[arg-type]
    "ids-in-many": (ValueError, lambda a, j: j.enqueue_many([(1,), (2,)], job_ids=["ok", "n o"])),
    # non-finite floats
    "arg-nan": (TypeError, lambda a, j: j.enqueue(NAN)),
    "arg-inf": (TypeError, lambda a, j: j.enqueue(1, -INF)),
    "arg-nested": (TypeError, lambda a, j: j.enqueue([1, {"x": [INF]}])),
    "kwarg-nan": (TypeError, lambda a, j: j.enqueue(x=NAN)),
    "kwarg-nested": (TypeError, lambda a, j: a.enqueue("send", kwargs={"a": {"b": (NAN,)}})),
    "many-nan": (TypeError, lambda a, j: j.enqueue_many([(1,), (None,), ({"k": NAN},)])),
    # queue names
    "queue-comma": (ValueError, lambda a, j: a.enqueue("send", [1], queue="a,b")),
    "queue-zero-width": (ValueError, lambda a, j: a.enqueue("send", [1], queue="mail\u200ber")),
    "queue-control": (ValueError, lambda a, j: j.enqueue_with(queue="mail\x07")(1)),
    "queue-many": (ValueError, lambda a, j: j.enqueue_many([(1,)], queue="a,b")),
    # delays
    "delay-inf": (ValueError, lambda a, j: a.enqueue("send", [1], delay_s=INF)),
    "delay-nan": (ValueError, lambda a, j: j.enqueue_with(delay_s=NAN)(1)),
    "delay-negative": (ValueError, lambda a, j: j.enqueue_many([(1,)], delay_s=-1)),
    "delay-1e300": (ValueError, lambda a, j: a.enqueue("send", [1], delay_s=1e300)),
    "delay-bool": (TypeError, lambda a, j: a.enqueue("send", [1], delay_s=True)),
    "enqueue_in-nan": (ValueError, lambda a, j: j.enqueue_in(NAN, 1)),
    "enqueue_in-negative": (ValueError, lambda a, j: j.enqueue_in(-0.5, 1)),
    "enqueue_in-str": (TypeError, lambda a, j: j.enqueue_in("5", 1)),  # type: ignore[arg-type]
    # due times (at)
    "at-naive": (ValueError, lambda a, j: j.enqueue_at(datetime.now() + timedelta(minutes=5), 1)),
    "at-naive-past": (ValueError, lambda a, j: a.enqueue("send", [1], at=datetime(2020, 1, 1))),
    "at-nan": (ValueError, lambda a, j: j.enqueue_at(NAN, 1)),
    "at-inf": (ValueError, lambda a, j: j.enqueue_with(at=INF)(1)),
    "at-negative": (ValueError, lambda a, j: j.enqueue_many([(1,)], at=-1.0)),
    "at-11-years": (ValueError, lambda a, j: j.enqueue_at(time.time() + 11 * 365 * 86400, 1)),
    "at-year-9999": (
        ValueError,
        lambda a, j: j.enqueue_at(datetime(9999, 1, 1, tzinfo=timezone.utc), 1),
    ),
    "at-bool": (TypeError, lambda a, j: j.enqueue_at(True, 1)),
    "at-str": (TypeError, lambda a, j: a.enqueue("send", [1], at="2026-12-01T09:00Z")),  # type: ignore[arg-type]
    "at-and-delay": (TypeError, lambda a, j: a.enqueue("send", [1], delay_s=5, at=time.time())),
    "at-and-delay-with": (TypeError, lambda a, j: j.enqueue_with(delay_s=1, at=time.time())),
    "at-and-delay-many": (
        TypeError,
        lambda a, j: j.enqueue_many([(1,)], delay_s=1, at=time.time() + 5),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_and_nothing_is_written(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None], case: str
) -> None:
    kind, attempt = BAD[case]
    with pytest.raises(kind) as info:
        attempt(app, send)
    assert type(info.value) is kind
    assert namespace_keys(r, app.namespace) == []


def test_non_finite_errors_say_where(send: fastq.JobDef[None]) -> None:
    with pytest.raises(TypeError, match=r"args\[0\]\[1\]\['x'\] is nan: JSON cannot carry"):
        send.enqueue([1, {"x": NAN}])
    with pytest.raises(TypeError, match=r"^call 2: kwargs\['k'\] is inf"):
        send.enqueue_many([(1,), (None,), {"k": INF}])


def test_retry_delay_is_checked() -> None:
    for bad in (INF, NAN, -1, 1e300):
        with pytest.raises(ValueError, match="Retry delay_s"):
            fastq.Retry(delay_s=bad)
    with pytest.raises(TypeError, match="Retry delay_s"):
        fastq.Retry(delay_s=True)
    assert fastq.Retry(delay_s=0).delay_s == 0


def test_enqueue_with_options_land(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None]
) -> None:
    later = send.enqueue_with(delay_s=30, job_id="welcome-42")
    assert later("a@example.com", "hi") == "welcome-42"
    assert later("a@example.com", "hi") == "welcome-42"  # the same id again: no-op
    info = app.get_job("welcome-42")
    assert info is not None and info.state == "scheduled"
    assert r.zscore(app.keys("q").scheduled, "welcome-42") is not None

    app.declare_queue("other")  # no job of the app is registered there
    urgent = send.enqueue_with(priority=7, queue="other")(1)
    assert r.zscore(app.keys("other").prio, urgent) is not None
    assert r.hexists(app.keys("other").jobs, urgent)
    assert app.stats("q")["enqueued"] == 1 and app.stats("other")["enqueued"] == 1
    assert "other" in app.queues()

    ids = send.enqueue_many([(1,), (2,)], queue="other", delay_s=5)
    assert all(r.zscore(app.keys("other").scheduled, i) for i in ids)


def test_app_reads_fastq_redis_url(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTQ_REDIS_URL", redis_server.url)
    app = fastq.App(namespace=namespace)
    assert app.redis_url == redis_server.url
    assert app.enqueue("x", [1]) and app.stats("default")["ready"] == 1
    assert fastq.App("redis://127.0.0.1:1/0").redis_url == "redis://127.0.0.1:1/0"
    monkeypatch.delenv("FASTQ_REDIS_URL")
    assert fastq.App().redis_url == "redis://127.0.0.1:6379/0"


def test_every_producer_path_says_redis_is_unavailable() -> None:
    app = fastq.App(f"redis://127.0.0.1:{free_port()}/0", namespace="nowhere")

    @app.job(queue="q")
    def job(x: int) -> None: ...

    with pytest.raises(fastq.RedisUnavailable, match="cannot reach Redis"):
        app.get_job("some-id")
    with pytest.raises(fastq.RedisUnavailable):
        app.get_job("some-id", queue="q")
    with pytest.raises(fastq.RedisUnavailable):
        app.queues()
    with pytest.raises(fastq.RedisUnavailable):
        app.stats("q")
    with pytest.raises(fastq.RedisUnavailable):
        job.enqueue_with(delay_s=1)(1)
    with pytest.raises(fastq.EnqueueInterrupted) as info:
        job.enqueue_many([(1,), (2,)], job_ids=["a", "b"])
    exc = info.value
    assert isinstance(exc, fastq.RedisUnavailable) and isinstance(exc, fastq.EnqueueError)
    assert (exc.ids, exc.written, exc.not_written) == (["a", "b"], [], ["a", "b"])
    assert exc.fault == "unavailable" and "did not go in" in str(exc)
    assert isinstance(exc.__cause__, fastq.RedisUnavailable)


def test_a_connection_lost_mid_blast_may_have_written_anything(
    app: fastq.App, send: fastq.JobDef[None], monkeypatch: pytest.MonkeyPatch
) -> None:
    app.queues()  # connected

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(scripts, "call_many", lost)
    with pytest.raises(fastq.RedisUnavailable) as info:
        send.enqueue_many([(i,) for i in range(3)], job_ids=["a", "b", "c"])
    exc = info.value
    assert isinstance(exc, fastq.EnqueueInterrupted)
    assert exc.written == [] and exc.not_written == ["a", "b", "c"]
    assert "may or may not have gone in" in str(exc) and "job_ids=exc.ids" in str(exc)
    assert isinstance(exc.__cause__, redis.ConnectionError)
    with pytest.raises(fastq.RedisUnavailable) as info:  # a single enqueue: the same,
        send.enqueue_with(job_id="d")(1)  # naming the id to retry with
    assert isinstance(info.value, fastq.EnqueueInterrupted) and info.value.ids == ["d"]
    assert "job d may or may not have gone in" in str(info.value)


@pytest.fixture
def small_redis() -> Iterator[RedisServer]:
    server = RedisServer(
        extra_args=["--maxmemory", "12mb", "--maxmemory-policy", "noeviction"]
    ).start()
    yield server
    server.cleanup()


def test_a_blast_into_a_redis_that_fills_up_says_what_went_in(small_redis: RedisServer) -> None:
    app = fastq.App(small_redis.url, namespace="blast")

    @app.job(queue="mail")
    def mail(to: str, body: str) -> None: ...

    r = redis.Redis.from_url(small_redis.url)
    calls = [(f"user{i}@example.com", "x" * 700) for i in range(20_000)]
    with pytest.raises(fastq.EnqueueError) as info:
        mail.enqueue_many(calls)
    exc = info.value
    assert not isinstance(exc, fastq.RedisUnavailable)
    assert len(exc.ids) == 20_000 and exc.fault == "out of memory"
    assert 0 < len(exc.written) < 20_000, "memory should run out partway"
    assert exc.written + exc.not_written == exc.ids
    in_redis = {k.decode() for k in r.hkeys(app.keys("mail").jobs)}
    assert set(exc.written) == in_redis and len(in_redis) == len(exc.written)
    assert f"took {len(exc.written)} of 20000 jobs" in str(exc)
    assert isinstance(exc.__cause__, redis.ResponseError)

    # a single enqueue meets a full Redis as RedisRefused (once the blast's query
    # buffers are freed there may be room for one more: take it away)
    r.config_set("maxmemory", 1)
    with pytest.raises(fastq.RedisRefused) as refused:
        mail.enqueue("late@example.com", "x")
    assert refused.value.fault == "out of memory"
    assert r.hlen(app.keys("mail").jobs) == len(exc.written)

    r.config_set("maxmemory", 0)
    assert mail.enqueue_many(calls, job_ids=exc.ids) == exc.ids
    assert r.hlen(app.keys("mail").jobs) == 20_000
    ready = r.lrange(app.keys("mail").ready, 0, -1)
    assert len(ready) == 20_000 and len(set(ready)) == 20_000
    assert app.stats("mail")["enqueued"] == 20_000
    r.close()
    app.close()


def test_refusals_reach_producers_as_redis_refused(namespace: str) -> None:
    with RedisServer(extra_args=["--requirepass", "s3cret"]) as server:
        app = fastq.App(server.url, namespace=namespace)  # no password
        with pytest.raises(fastq.RedisRefused, match="access denied") as info:
            app.enqueue("x", [1])
        assert info.value.fault == "access denied"
        with pytest.raises(fastq.RedisRefused):
            app.stats("default")
        with pytest.raises(fastq.EnqueueError) as blast:
            app.enqueue_many("x", [(1,)], job_ids=["a"])
        assert blast.value.fault == "access denied" and blast.value.not_written == ["a"]


def test_a_queue_no_one_knows_is_refused_and_nothing_is_written(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None]
) -> None:
    before = sorted(r.keys("*"))
    with pytest.raises(fastq.UnknownQueue, match=r"unknown queue 'mailr'.*known: q\b"):
        send.enqueue_with(queue="mailr")(1)
    with pytest.raises(fastq.UnknownQueue, match="app.declare_queue"):
        app.enqueue("send", [1], queue="mailr")
    with pytest.raises(fastq.UnknownQueue):
        send.enqueue_many([(1,), (2,)], queue="mailr")
    assert sorted(r.keys("*")) == before
    assert "mailr" not in app.queues()

    # known once another producer enqueued on it, or once declared
    other = fastq.App(app.redis_url, namespace=app.namespace)
    other.enqueue("send", [1], queue="mailr")
    assert send.enqueue_with(queue="mailr")(2)
    app.declare_queue("brand-new")
    assert send.enqueue_with(queue="brand-new")(3)
    assert app.stats("mailr")["ready"] == 2 and app.stats("brand-new")["ready"] == 1


def test_a_producer_without_jobs_warns_once_of_a_queue_redis_does_not_know(
    app: fastq.App, caplog: pytest.LogCaptureFixture
) -> None:
    producer = fastq.App(app.redis_url, namespace=app.namespace)  # registers no job
    with caplog.at_level("WARNING", logger="fastq.enqueue"):
        producer.enqueue("send", [1], queue="mailr")
        producer.enqueue("send", [2], queue="mailr")
        producer.enqueue("send", [3])  # "default" is always known
    warnings = [rec.getMessage() for rec in caplog.records]
    assert len(warnings) == 1 and "'mailr', which Redis does not know" in warnings[0]
    assert producer.stats("mailr")["ready"] == 2


def test_a_starting_worker_makes_its_apps_queues_known(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None]
) -> None:
    from fastq.connection.checks import check_redis

    assert not r.sismember(f"{app.namespace}:queues", "q")
    check_redis(app, "worker")  # what a worker and a pool's master do as they start
    assert r.sismember(f"{app.namespace}:queues", "q")
