"""Pause, resume and purge as users call them, against a real redis-server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

import fastq
from fastq.protocol import control
from fastq.protocol.contracts import ACK, CLAIM, PURGE
from tests.support.keys import namespace_keys
from tests.support.processes import fastq_cmd, subprocess_env
from tests.support.workers import drain_in_thread


def wait_for(predicate: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_pause_during_a_drain_stops_claims_within_one_batch_and_resume_continues(
    app: fastq.App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    caplog.set_level("INFO", logger="fastq.worker")
    runs = f"{app.namespace}:runs"
    at_pause: dict[str, int] = {}

    @app.job(queue="mailer")
    def send(i: int) -> None:
        r.hincrby(runs, str(i), 1)
        if i == 100:
            app.pause("mailer")
            # what the worker holds now: this batch, and a claim written ahead
            at_pause["ran"] = r.hlen(runs)
            at_pause["held"] = app.stats("mailer")["inflight"]

    app.enqueue_many("send", [(i,) for i in range(2000)], queue="mailer")
    claims = 0
    real_claim = fastq.worker.worker.Pump.claim

    def counting_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return real_claim(self, *args, **kwargs)

    monkeypatch.setattr(fastq.worker.worker.Pump, "claim", counting_claim)
    worker, thread = drain_in_thread(app, ["mailer"], burst=False, idle_timeout_s=60)
    try:
        wait_for(lambda: bool(at_pause) and app.stats("mailer")["inflight"] == 0)
        ran_paused = r.hlen(runs)
        # the jobs in hand finished and were acked; nothing more was claimed
        assert ran_paused - at_pause["ran"] < at_pause["held"]
        stats = app.stats("mailer")
        assert stats["paused"] == 1 and stats["ready"] == 2000 - ran_paused
        assert stats["processed"] == ran_paused
        # paused, the worker sleeps on the wake-up key rather than claim in a loop
        claims_then = claims
        time.sleep(0.5)
        assert claims - claims_then <= 1 and r.hlen(runs) == ran_paused
        paused_lines = [m for m in caplog.messages if "every queue is paused" in m]
        assert len(paused_lines) == 1
        t0 = time.monotonic()
        app.resume("mailer")
        wait_for(lambda: r.hlen(runs) > ran_paused)
        assert time.monotonic() - t0 < 2  # woken, not the 60 s idle wait
        wait_for(lambda: r.hlen(runs) == 2000)
        wait_for(lambda: app.stats("mailer")["processed"] == 2000)
    finally:
        worker.stop()
        r.rpush(app.keys("mailer").wake, 1)  # out of its idle wait
        thread.join(10)
    assert not thread.is_alive()
    assert set(r.hvals(runs)) == {b"1"}  # nothing run twice, nothing lost
    assert app.stats("mailer")["paused"] == 0


def test_a_paused_queue_still_takes_enqueues_and_get_job_reports_them(
    app: fastq.App,
) -> None:
    @app.job(queue="mailer")
    def send(i: int) -> None:
        pass

    app.pause("mailer")
    job_id = send.enqueue(1)
    info = app.get_job(job_id)
    assert info is not None and info.state == "queued"
    assert app.stats("mailer")["ready"] == 1
    app.pause("mailer")  # twice is harmless
    app.resume("mailer")
    app.resume("mailer")
    assert app.stats("mailer")["paused"] == 0


def test_a_worker_on_a_paused_and_a_live_queue_keeps_draining_the_live_one(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="a")
    def ja(i: int) -> None:
        r.hincrby(f"{app.namespace}:a", str(i), 1)

    @app.job(queue="b")
    def jb(i: int) -> None:
        r.hincrby(f"{app.namespace}:b", str(i), 1)

    ja.enqueue_many([(i,) for i in range(100)])
    jb.enqueue_many([(i,) for i in range(100)])
    app.pause("a")
    worker, thread = drain_in_thread(app, ["a", "b"])  # burst: stops when b is done
    thread.join(20)
    assert not thread.is_alive()
    assert r.hlen(f"{app.namespace}:b") == 100 and not r.exists(f"{app.namespace}:a")
    assert app.stats("a")["ready"] == 100


def test_purge_of_30000_ready_and_scheduled_jobs_leaves_in_flight_ones_alone(
    app: fastq.App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.job(queue="mailer")
    def send(i: int) -> None:
        pass

    send.enqueue_many([(i,) for i in range(20)])
    k = app.keys("mailer")
    reply = CLAIM.call(r, CLAIM.keys_for(k, "w1"), CLAIM.argv("w1", 20, 60_000, 0))
    held = list(reply.ids)
    assert len(held) == 20
    send.enqueue_many([(i,) for i in range(18_000)])
    send.enqueue_many([(i,) for i in range(2_000)], priority=5)
    send.enqueue_many([(i,) for i in range(10_000)], delay_s=3600)
    calls: list[int] = []
    real_call = PURGE.call

    def counting_call(client: Any, keys: Any, argv: Any) -> tuple[int, int]:
        taken, deleted = real_call(client, keys, argv)
        calls.append(taken)
        return taken, deleted

    monkeypatch.setattr(PURGE, "call", counting_call)
    assert app.purge("mailer") == 30_000
    assert max(calls) <= 1000 and len(calls) >= 30  # bounded calls
    stats = app.stats("mailer")
    assert (stats["ready"], stats["scheduled"], stats["inflight"], stats["purged"]) == (
        0,
        0,
        20,
        30_000,
    )
    assert sorted(r.hkeys(k.jobs)) == sorted(held)  # the in-flight envelopes stay
    # and their acks land as usual
    done = ACK.argv(10**9, 1000, 0, done=held)
    assert ACK.call(r, ACK.keys_for(k, "w1"), done) == 20
    assert app.stats("mailer")["processed"] == 20
    assert app.purge("mailer") == 0


def test_purge_of_dead_and_broken_only_when_asked(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="mailer", retries=0)
    def bad() -> None:
        raise RuntimeError("typo")

    bad.enqueue()
    r.hset(app.keys("mailer").jobs, "x", b"{not json")
    r.lpush(app.keys("mailer").ready, "x")
    worker, thread = drain_in_thread(app, ["mailer"])
    thread.join(20)
    stats = app.stats("mailer")
    assert (stats["dead"], stats["broken"]) == (1, 1)
    bad.enqueue()
    assert app.purge("mailer") == 1
    assert (app.stats("mailer")["dead"], app.stats("mailer")["broken"]) == (1, 1)
    assert app.purge("mailer", ready=False, scheduled=False, dead=True) == 1
    assert app.purge("mailer", ready=False, scheduled=False, broken=True) == 1
    assert not r.exists(app.keys("mailer").jobs)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda a: a.pause("nope"), ValueError, "unknown queue 'nope'"),
        (lambda a: a.resume("nope"), ValueError, "unknown queue 'nope'"),
        (lambda a: a.purge("nope"), ValueError, "unknown queue 'nope'"),
        (lambda a: a.pause("bad:name"), ValueError, "queue name"),
        (lambda a: a.pause(""), ValueError, "queue name"),
        (lambda a: a.pause(7), TypeError, "queue name"),
        (lambda a: a.purge("bad name"), ValueError, "queue name"),
        (lambda a: a.purge("mailer", ready=False, scheduled=False), ValueError, "nothing selected"),
        (lambda a: a.purge("mailer", dead="yes"), TypeError, "dead must be True or False"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    app: fastq.App, r: redis.Redis, call: Any, error: type[Exception], match: str
) -> None:
    @app.job(queue="mailer")
    def send() -> None:
        pass

    send.enqueue()
    before = {key: r.dump(key) for key in namespace_keys(r, app.namespace)}
    with pytest.raises(error, match=match):
        call(app)
    assert {key: r.dump(key) for key in namespace_keys(r, app.namespace)} == before


def test_purge_batch_out_of_range_is_refused(app: fastq.App) -> None:
    for batch in (0, 5001, True, 1.5):
        with pytest.raises(ValueError, match="batch"):
            control.purge(
                app.redis,
                app.keys("q"),
                ready=True,
                scheduled=False,
                dead=False,
                broken=False,
                batch=batch,  # type: ignore[arg-type]
            )


def test_purge_does_not_chase_a_producer_forever(app: fastq.App, r: redis.Redis) -> None:
    @app.job(queue="mailer")
    def send(i: int) -> None:
        pass

    send.enqueue_many([(i,) for i in range(50)])
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            send.enqueue_many([(i,) for i in range(20)])

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        n = control.purge(
            app.redis,
            app.keys("mailer"),
            ready=True,
            scheduled=True,
            dead=False,
            broken=False,
            batch=10,
        )
    finally:
        stop.set()
        producer.join(5)
    assert n >= 50


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pause_and_resume_a_pool_of_two_children(
    redis_server: Any, app: fastq.App, r: redis.Redis
) -> None:
    import signal
    import subprocess

    runs = f"{app.namespace}:runs"
    app.enqueue_many("work", [(i, 0.002) for i in range(2000)], queue="q")
    pool = subprocess.Popen(
        fastq_cmd("pool", "-c", "2", "--app", "tests.apps.pool_jobs", "--namespace", app.namespace),
        env=subprocess_env(redis_server.url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: r.hlen(runs) >= 200, timeout_s=60)
        app.pause("q")
        # within a batch per child, the claims stop and the jobs in hand are acked
        wait_for(lambda: app.stats("q")["inflight"] == 0)
        ran_paused = r.hlen(runs)
        assert ran_paused < 2000
        time.sleep(0.5)
        assert r.hlen(runs) == ran_paused
        assert app.stats("q")["ready"] == 2000 - ran_paused
        app.resume("q")
        wait_for(lambda: r.hlen(runs) == 2000, timeout_s=60)
        wait_for(lambda: app.stats("q")["processed"] == 2000)
    finally:
        pool.send_signal(signal.SIGTERM)
        _, err = pool.communicate(timeout=30)
    assert pool.returncode == 0, err[-2000:]
    assert set(r.hvals(runs)) == {b"1"}
