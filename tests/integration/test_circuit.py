"""Circuit breakers (``@app.job(circuit_key=...)``) against a resource that goes down
and comes back: a real redis-server, real workers. While it is down, at most
``circuit_failures`` attempts and a few probes are made, no job goes dead and no
retry is spent by the jobs that wait; once it is back, every job is delivered."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import fastq
from fastq.circuit import CircuitKey
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, wait_until
from tests.support.processes import run_cli
from tests.support.workers import drain

pytestmark = pytest.mark.timeout(120)

OUTAGE_S = 2.0
OPEN_S = 0.4


def smtp_app(app: fastq.App, kind: str) -> None:
    """Registers ``send(host, i)``: it fails while ``{ns}:down:{host}`` is set,
    recording every attempt (host, i, ok) in ``{ns}:attempts``."""

    def body(host: str, i: int) -> None:
        r = app.redis
        down = bool(r.exists(f"{app.namespace}:down:{host}"))
        r.rpush(f"{app.namespace}:attempts", f"{host} {i} {'fail' if down else 'ok'}")
        if down:
            raise ConnectionRefusedError(f"{host}: connection refused")

    options: dict[str, Any] = {
        "queue": "mail",
        "circuit_key": "smtp:{host}",
        "circuit_failures": 3,
        "circuit_open_s": OPEN_S,
        "retry_delays_s": [0.05],
        "retries": 5,
    }
    if kind == "async":

        @app.job(**options)
        async def send(host: str, i: int) -> None:
            body(host, i)

    else:
        app.job(name="send", **options)(body)


def attempts(r: redis.Redis, namespace: str) -> list[tuple[str, int, str]]:
    out = []
    for raw in r.lrange(f"{namespace}:attempts", 0, -1):
        host, i, said = raw.decode().split()
        out.append((host, int(i), said))
    return out


@pytest.mark.parametrize("kind", ["sync", "async", "threads"])
def test_a_resource_down_costs_a_few_attempts_and_no_job(
    app: fastq.App, r: redis.Redis, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    smtp_app(app, kind)
    n = 200
    r.set(f"{app.namespace}:down:down.example", 1)
    app.enqueue_many("send", [("down.example", i) for i in range(n)], queue="mail")
    app.enqueue_many("send", [("up.example", i) for i in range(n)], queue="mail")
    timer = threading.Timer(OUTAGE_S, r.delete, (f"{app.namespace}:down:down.example",))
    timer.start()
    runner = {"sync": {}, "async": {"async_jobs": 4}, "threads": {"threads": 4}}[kind]
    started = time.monotonic()
    try:
        with caplog.at_level("WARNING", logger="fastq.worker"):
            drain(app, ["mail"], burst_horizon_s=OUTAGE_S + 30, **runner)
    finally:
        timer.cancel()
    seen = attempts(r, app.namespace)
    failed = [a for a in seen if a[2] == "fail"]
    down_ok = {i for host, i, said in seen if host == "down.example" and said == "ok"}
    up_ok = {i for host, i, said in seen if host == "up.example" and said == "ok"}
    # every job delivered once its host was back, none dead, the other host untouched
    assert down_ok == set(range(n)) and up_ok == set(range(n)), (app.stats("mail"), seen)
    stats = app.stats("mail")
    assert (stats["processed"], stats["dead"]) == (2 * n, 0)
    # while down: the failures that opened it (3; with jobs in flight, those started
    # before it opened too), then one probe each time it half-opened (open 0.4 s,
    # then 0.8, 1.6...): however many jobs of the host there are
    assert len(failed) <= 3 + runner.get("async_jobs", runner.get("threads", 0)) + 4, failed
    assert time.monotonic() - started >= OUTAGE_S
    log = caplog.text
    assert "circuit smtp:down.example opened" in log
    assert "circuit smtp:down.example closed" in log
    assert log.count("circuit smtp:down.example closed") == 1
    assert "smtp:up.example" not in log
    assert app.circuits() == {}  # closed, and its count of failures gone with the success


def test_a_failed_probe_opens_it_again_for_longer(app: fastq.App, r: redis.Redis) -> None:
    smtp_app(app, "sync")
    r.set(f"{app.namespace}:down:d.example", 1)
    app.enqueue_many("send", [("d.example", i) for i in range(3)], queue="mail")
    drain(app, ["mail"], burst_horizon_s=0.1)  # the three failures open it
    state = app.circuits()["smtp:d.example"]
    assert state["state"] == "open" and 0 < state["open_s"] <= OPEN_S and state["level"] == 0
    time.sleep(OPEN_S + 0.1)
    app.enqueue("send", ("d.example", 9), queue="mail")
    drain(app, ["mail"], burst_horizon_s=0.1)  # half-open: one probe, which fails
    state = app.circuits()["smtp:d.example"]
    assert state["state"] == "open" and state["level"] == 1
    assert OPEN_S < state["open_s"] <= 2 * OPEN_S


def test_fastq_stats_shows_an_open_circuit(app: fastq.App) -> None:
    # open for a minute: still open when the command has started, however slow the box
    @app.job(queue="mail", circuit_key="smtp:{host}", circuit_failures=1, circuit_open_s=60)
    def send(host: str) -> None:
        raise ConnectionRefusedError(host)

    app.enqueue("send", ("mx.example",), queue="mail")
    drain(app, ["mail"], burst_horizon_s=0)
    out = run_cli(app.redis_url, "stats", "--namespace", app.namespace)
    assert out.returncode == 0, out.stderr
    assert "circuits:\n  smtp:mx.example  open for " in out.stdout
    assert "(opened once in a row)" in out.stdout


def test_bad_circuit_options_are_refused_at_registration(app: fastq.App) -> None:
    def send(host: str) -> None:
        pass

    for options, error, said in (
        ({"circuit_key": "smtp:{hots}"}, ValueError, "'hots' is not a parameter"),
        ({"circuit_key": 5}, TypeError, "circuit_key must be a str"),
        ({"circuit_key": "k", "circuit_failures": 0}, ValueError, "circuit_failures must be"),
        ({"circuit_key": "k", "circuit_failures": 2.0}, TypeError, "circuit_failures must be"),
        ({"circuit_key": "k", "circuit_open_s": float("nan")}, ValueError, "circuit_open_s"),
        ({"circuit_key": "k", "circuit_open_s": 0}, ValueError, "circuit_open_s"),
        ({"circuit_failures": 3}, ValueError, "need a circuit_key"),
        ({"circuit_key": "k", "delivery": "at_most_once"}, ValueError, "at-most-once"),
    ):
        with pytest.raises(error, match=said):
            app.job(queue="mail", **options)(send)
    assert "send" not in app.registry
    assert CircuitKey(send, "smtp:{host}", 20, 5.0).key_for(["a"], {}) == "smtp:a"


def test_a_pools_children_share_the_circuit(
    redis_server: RedisServer, namespace: str, r: redis.Redis, tmp_path: Path
) -> None:
    """``fastq pool -c 2``, 1,000 jobs a host, one host down for 3 s: its children
    open the one circuit between them, and every job is delivered once it is back."""
    from tests.apps.circuit_jobs import app, send

    app.configure(redis_url=redis_server.url, namespace=namespace)
    n, outage_s = 1000, 3.0
    r.set(f"{namespace}:down:down.example", 1)
    send.enqueue_many([("down.example", i) for i in range(n)])
    send.enqueue_many([("up.example", i) for i in range(n)])
    pool = Pool(
        redis_server.url, namespace, tmp_path / "pool.log", "-c", "2", app="tests.apps.circuit_jobs"
    )
    try:
        wait_until(lambda: r.llen(f"{namespace}:attempts") > 0, 60, "the first attempt")
        time.sleep(outage_s)
        r.delete(f"{namespace}:down:down.example")
        wait_until(lambda: app.stats("q")["processed"] == 2 * n, 120, "every job processed")
        assert pool.stop() == 0
    finally:
        pool.kill()
    seen = attempts(r, namespace)
    failed = [a for a in seen if a[2] == "fail"]
    ok = {(host, i) for host, i, said in seen if said == "ok"}
    assert ok == {(h, i) for h in ("down.example", "up.example") for i in range(n)}
    assert app.stats("q")["dead"] == 0
    # 5 in a row open it (each child may have one more in hand), then a probe at
    # each half-open: 0.5 s, then 1, 2 s... over a 3 s outage
    assert len(failed) <= 5 + 2 + 6, len(failed)
    log = (tmp_path / "pool.log").read_text()
    assert log.count("circuit smtp:down.example opened") >= 1
    assert log.count("circuit smtp:down.example closed") == 1
    assert app.circuits() == {}


def test_the_circuits_listed_are_those_noted_open_and_an_expired_one_leaves(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="mail", circuit_key="smtp:{host}", circuit_failures=1, circuit_open_s=60)
    def send(host: str) -> None:
        raise ConnectionRefusedError(host)

    app.enqueue("send", ("mx.example",), queue="mail")
    drain(app, ["mail"], burst_horizon_s=0)
    keys = app.store.namespace_keys
    assert r.smembers(keys.circuits) == {b"smtp:mx.example"}
    assert list(app.circuits()) == ["smtp:mx.example"]
    r.delete(keys.circuit("smtp:mx.example"))  # its state expired
    assert app.circuits() == {}
    assert r.smembers(keys.circuits) == set()
