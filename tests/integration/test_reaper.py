"""The reaper's own bookkeeping on one Redis (its sweeps under faults are in
tests/fault: test_redis_down, test_cluster_leases)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import redis

import fastq
from fastq.protocol.contracts import CLAIM
from fastq.reaper import reaper as reaper_module
from fastq.reaper import watch as watch_module
from fastq.reaper.reaper import Reaper
from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env


def test_the_last_queue_list_stands_while_it_cannot_be_read(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the list lives on one master: while that one does not answer,
    the queues on the others are swept all the same."""
    monkeypatch.setattr(reaper_module, "_QUEUES_REFRESH_S", 0.0)  # read at every sweep
    app.enqueue("send", queue="mail")
    client = app.new_client(retries=0)
    reaper = Reaper(app, handle_signals=False)
    reaper.sweep(client)
    assert reaper.queues(client) == ["mail"]

    def away(*args: Any, **kwargs: Any) -> list[str]:
        raise redis.ConnectionError("the master keeping the list does not answer")

    monkeypatch.setattr(app, "physical_queues_on", away)
    app.enqueue("send", queue="mail", delay_s=0.05)
    time.sleep(0.1)
    reaper.sweep(client)  # promotes the due job: "mail" is still swept
    stats = app.stats("mail")
    assert (stats["ready"], stats["scheduled"]) == (2, 0)
    with pytest.raises(redis.ConnectionError):  # no list read yet: nothing to sweep
        Reaper(app, handle_signals=False).sweep(client)
    client.close()


def _host_address() -> Optional[str]:
    """An IPv4 address of this host other than the loopback's, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: it picks the route's source
            address: str = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("refusal", ["protected mode", "password"])
def test_a_standalone_reaper_that_redis_refuses_exits_with_one_line(
    refusal: str, namespace: str
) -> None:
    if refusal == "protected mode":
        # no password: Redis takes only loopback connections, and this one is not
        address = _host_address()
        if address is None:
            pytest.skip("this host has no address but the loopback's")
        server = RedisServer(extra_args=["--bind", "127.0.0.1", address, "--protected-mode", "yes"])
        url_host = address
    else:
        server = RedisServer(extra_args=["--requirepass", "s3cret"])
        url_host = "127.0.0.1"
    server.start()
    try:
        url = f"redis://{url_host}:{server.port}/0"
        command = fastq_cmd("reaper", "--app", "tests.apps.counting", "--namespace", namespace)
        if refusal == "protected mode" and REDIS_PY < (8,):
            _retried_as_an_outage(command, subprocess_env(url))
            return
        proc = subprocess.run(
            command, env=subprocess_env(url), capture_output=True, text=True, timeout=60
        )
    finally:
        server.cleanup()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fastq: error:")]
    assert len(errors) == 1, proc.stderr
    expected = "protected mode" if refusal == "protected mode" else "check the user and password"
    assert f"Redis at redis://{url_host}:{server.port}/0 refused the connection" in errors[0]
    assert expected in errors[0], errors[0]


# redis-py 7 (the newest for Python 3.9) meets a Redis in protected mode as a connection
# reset while it writes its first command, before it reads the DENIED the server sent:
# fastq cannot tell that from an outage, and retries (docs/redis.md says so)
REDIS_PY = tuple(int(part) for part in redis.__version__.split(".")[:2])


def _retried_as_an_outage(command: list[str], env: dict[str, str]) -> None:
    """The reaper says Redis is unavailable, retries, and stays up until stopped."""
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first lines come at once: ends at the outage's
            if "Redis unavailable" in line:
                assert "retrying with backoff" in line, line
                break
        else:
            raise AssertionError(f"the reaper exited ({proc.wait()}) without retrying")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def _commands(r: redis.Redis) -> int:
    return sum(int(s["calls"]) for s in r.info("commandstats").values())


@pytest.mark.slow
def test_an_idle_reaper_costs_redis_little_however_many_queues_it_knows(
    namespace: str, tmp_path: Path
) -> None:
    """Its idle work grows with the queues that have work, not with every queue ever
    known; a queue that gets work is still watched within a sweep."""
    server = RedisServer().start()  # its own: the counts are the reaper's alone
    r = redis.Redis(port=server.port)
    app = fastq.App(server.url, namespace=namespace)
    n = 3000
    r.sadd(f"{namespace}:queues", *[f"q{i}" for i in range(n)])
    with open(tmp_path / "reaper.log", "wb") as log:
        proc = subprocess.Popen(
            fastq_cmd("reaper", "--app", "tests.apps.counting", "--namespace", namespace),
            env=subprocess_env(server.url),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # its first sweep reaps each queue once: they are new to it
        wait_until(
            lambda: int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)) >= n,
            60,
            "the first sweep",
        )
        before, t0 = _commands(r), time.monotonic()
        time.sleep(3)
        per_s = (_commands(r) - before) / (time.monotonic() - t0)
        # reaping every queue every second was a script of ~8 commands each: ~25,000/s
        assert per_s < 300, f"{per_s:.0f} commands/s"
        # a job due soon on one of the idle queues is promoted, by a sweep or two
        app.enqueue("count", (1,), queue="q1234", delay_s=0.2)
        wait_until(lambda: app.stats("q1234")["ready"] == 1, 15, "the due job promoted")
        # a lease that lapses on another is taken back
        app.enqueue("count", (2,), queue="q2345")
        k = app.keys("q2345")
        CLAIM.call(r, CLAIM.keys_for(k, "w-gone"), CLAIM.argv("w-gone", 1, 300, 100))
        assert app.stats("q2345")["inflight"] == 1  # held by a worker that is gone
        wait_until(lambda: app.stats("q2345")["ready"] == 1, 15, "the lapsed lease taken back")
        assert app.stats("q2345")["inflight"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        app.close()
        r.close()
        server.cleanup()
    assert "Traceback" not in (tmp_path / "reaper.log").read_text()


def test_an_idle_queue_is_trimmed_in_its_turn(
    app: fastq.App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle queue is not reaped every sweep, but its dead set is still trimmed."""
    monkeypatch.setattr(watch_module, "TRIM_EVERY_S", 0.3)
    app.declare_queue("old")
    k = app.keys("old")
    client = app.new_client(retries=0)
    reaper = Reaper(app, ["old"], interval_s=0.05, handle_signals=False)
    reaper.sweep(client)  # new to it: reaped, and idle from then on
    assert "old" not in reaper.watch.hot
    r.zadd(k.dead, {"gone": 1})  # died in 1970: past any max age
    r.hset(k.jobs, "gone", b'["x",[],1]')

    def trimmed() -> bool:
        reaper.sweep(client)
        return r.zcard(k.dead) == 0

    wait_until(trimmed, 10, "the dead job trimmed")
    assert r.hexists(k.jobs, "gone") == 0
    # and a delayed job makes it hot: reaped every sweep while it waits
    app.enqueue("send", queue="old", delay_s=3600)
    time.sleep(0.06)
    reaper.sweep(client)
    assert "old" in reaper.watch.hot
    client.close()
