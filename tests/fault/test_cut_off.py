"""A worker host cut off from Redis for longer than its lease (issue 23, item 10):
nothing is lost, the duplicates are only jobs it held when the cut began, and the
requests its workers gave up on, landing at Redis after they reconnected, change
nothing: no job ends up held by a worker that never received it. Each worker says
once that Redis went away, and once that it came back.

The cut is a proxy (``tests/support/cutoff.py``) that holds every byte while cut
and delivers what a closed connection had sent when the test says, after the
workers' new connections have gone through: a late request, every time.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

import fastq
from fastq.protocol.contracts import ACK, CLAIM
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker
from tests.support.cutoff import CutProxy
from tests.support.pool import Pool, noted_runs, wait_until
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(240)]

SENTINEL = b"fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id"
LEASE_S = 2  # a worker gives up on a reply after a lease and its idle timeout (5 s)


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[CutProxy]:
    p = CutProxy(redis_server.port)
    yield p
    p.stop()


@pytest.fixture
def reaper(redis_server: RedisServer, namespace: str) -> Iterator[subprocess.Popen[bytes]]:
    """A reaper on Redis' side of the cut: it takes back the cut-off workers' leases."""
    proc = subprocess.Popen(
        fastq_cmd(
            "reaper",
            "--app",
            "tests.apps.pool_jobs",
            "--namespace",
            namespace,
            "--interval",
            "0.2",
        ),
        env=subprocess_env(redis_server.url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield proc
    proc.terminate()
    proc.wait(timeout=10)


def held(r: redis.Redis, namespace: str) -> dict[bytes, set[bytes]]:
    """The jobs each worker holds: its held set less the sentinel."""
    out = {}
    for key in r.scan_iter(match=f"{namespace}:{{q}}:held:*", count=1000):
        out[key] = r.smembers(key) - {SENTINEL}
    return out


def held_args(r: redis.Redis, namespace: str) -> set[int]:
    """The ``i`` of each job some worker holds (read from its envelope)."""
    ids = [i for held_ids in held(r, namespace).values() for i in held_ids]
    envelopes = r.hmget(f"{namespace}:{{q}}:jobs", ids) if ids else []
    return {orjson.loads(env)[1][0] for env in envelopes if env is not None}  # [name, args, t]


def loop_lines(log: str, what: str) -> dict[str, int]:
    """How many lines of each worker's claim loop (not its lease keeper's) say ``what``."""
    counts: dict[str, int] = {}
    for worker in re.findall(rf"worker (\S+): Redis {what}", log):
        counts[worker] = counts.get(worker, 0) + 1
    return counts


def assert_recovered(
    app: fastq.App, r: redis.Redis, pool: Pool, namespace: str, n: int, at_cut: set[int]
) -> None:
    """The cut-off pool drains the ``n`` jobs: none lost, only jobs held at the cut
    run twice, no worker holds anything after, and each worker's claim loop said
    once that Redis went away (at once: a reply 2 s late) and once that it came back.
    Stops the pool."""

    def drained() -> bool:
        return sum(noted_runs(pool).values()) >= n and app.stats("q")["processed"] == n

    try:
        wait_until(drained, 90, "the drain")
    except AssertionError:
        raise AssertionError(f"not drained: {app.stats('q')}; held {held(r, namespace)}") from None
    # held by nobody, the late claims' jobs least of all
    assert all(not ids for ids in held(r, namespace).values()), held(r, namespace)
    stats = app.stats("q")
    assert (stats["ready"], stats["inflight"], stats["scheduled"]) == (0, 0, 0), stats
    ran = noted_runs(pool)
    assert set(ran) == set(range(n)), "a job was lost"
    twice = {i for i, times in ran.items() if times > 1}
    assert twice <= at_cut, f"ran twice, not held at the cut: {sorted(twice - at_cut)}"
    assert max(ran.values()) <= 2

    log = pool.log()
    assert pool.stop() == 0, log
    lost, back = loop_lines(log, "unavailable"), loop_lines(log, "back after")
    assert len(back) == 2 and lost == back == dict.fromkeys(back, 1), log
    assert "no reply for 2 s" in log, log
    assert "Traceback" not in log, log


@pytest.mark.parametrize(
    ("runner", "sleep_s"),
    [((), 0.004), (("--threads", "4"), 0.03)],  # a drain of 6-12 s with no cut
    ids=["sync", "threads"],
)
def test_requests_given_up_on_that_land_late_strand_nothing(
    app: fastq.App,
    r: redis.Redis,
    redis_server: RedisServer,
    namespace: str,
    proxy: CutProxy,
    reaper: subprocess.Popen[bytes],
    tmp_path: Path,
    runner: tuple[str, ...],
    sleep_s: float,
) -> None:
    n = 3000
    app.enqueue_many("note", [(i, sleep_s) for i in range(n)], queue="q")
    pool = Pool(
        proxy.url,
        namespace,
        tmp_path / "pool.log",
        "-c",
        "2",
        "--batch",
        "20",
        "--lease",
        str(LEASE_S),
        "--no-reaper",
        *runner,
    )
    try:
        pool.wait_children(2)
        wait_until(lambda: sum(noted_runs(pool).values()) >= 300, 60, "some progress")

        proxy.cut()
        time.sleep(0.3)  # what went through before the cut has run
        at_cut = held_args(r, namespace)
        assert at_cut, "the workers held nothing when the cut began"
        # their leases lapse and the reaper takes the jobs back
        wait_until(lambda: app.stats("q")["inflight"] == 0, 30, "the leases taken back")
        # a worker gives up on a round trip (a claim in it) and closes that connection
        # (the replies to what went through before the cut pass: each worker sends
        # one more request, which the cut holds)
        claim = CLAIM.script.sha.encode()
        wait_until(
            lambda: len(givers_up(proxy.held_by_closed(), claim)) >= 1,
            30,
            "a worker to give up on a request with a claim",
        )
        time.sleep(LEASE_S + 5 + 1)  # the other gives up on its own too, if it is to
        proxy.restore()
        # each worker's new connection goes through: its loop says Redis is back
        wait_until(lambda: len(loop_lines(pool.log(), "back after")) == 2, 30, "both workers back")

        late = proxy.deliver_late()
        assert sum(claim in b for b in late) >= 1, "no late claims to refuse"
        assert any(ACK.script.sha.encode() in b for b in late), "no late ack to refuse"

        assert_recovered(app, r, pool, namespace, n, at_cut)
    finally:
        pool.kill()


def givers_up(held: list[bytes], claim: bytes) -> set[bytes]:
    """The workers (by id) of the requests in ``held`` that hold a claim."""
    return {m.group(1) for b in held if claim in b for m in re.finditer(rb":held:([^\r]+)\r\n", b)}


class Netns:
    """A network namespace (the worker host) joined to this one by a veth pair: this
    side is ``host_ip``, the namespace's side ``worker_ip`` (the first /30 of a /24
    of 10.0.0.0/8 picked at random). Traffic stays on this machine."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"fastq-{tag}"
        self.host_dev, self.worker_dev = f"fqh{tag}", f"fqw{tag}"
        subnet = f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}"
        self.host_ip, self.worker_ip = f"{subnet}.1", f"{subnet}.2"

    def ip(self, *args: str, inside: bool = False) -> None:
        cmd = ["ip", *(("netns", "exec", self.name, "ip") if inside else ()), *args]
        subprocess.run(cmd, check=True, capture_output=True, timeout=10)

    def create(self) -> None:
        self.ip("netns", "add", self.name)
        self.ip("link", "add", self.host_dev, "type", "veth", "peer", "name", self.worker_dev)
        self.ip("link", "set", self.worker_dev, "netns", self.name)
        self.ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_dev)
        self.ip("link", "set", self.host_dev, "up")
        self.ip("addr", "add", f"{self.worker_ip}/30", "dev", self.worker_dev, inside=True)
        self.ip("link", "set", self.worker_dev, "up", inside=True)
        self.ip("link", "set", "lo", "up", inside=True)

    def link(self, state: str) -> None:
        """The worker host's link ``down`` or ``up``."""
        self.ip("link", "set", self.worker_dev, state, inside=True)

    @property
    def wrap(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_dev], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)


@pytest.fixture
def netns() -> Iterator[Netns]:
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("a network namespace needs root and iproute2")
    ns = Netns()
    try:
        ns.create()
    except subprocess.CalledProcessError as exc:
        ns.delete()
        pytest.skip(f"cannot make a network namespace here: {exc.stderr!r}")
    yield ns
    ns.delete()


def test_a_worker_host_whose_link_goes_down_then_up_strands_nothing(
    netns: Netns, namespace: str, tmp_path: Path
) -> None:
    """The same, with the worker host in a network namespace whose link goes down
    for longer than the workers wait for a reply, then up: whether a request given
    up on lands before or after the workers' new ones is the kernel's choice here."""
    server = RedisServer(
        appendonly=True,
        extra_args=["--bind", "127.0.0.1", netns.host_ip, "--protected-mode", "no"],
    ).start()
    app = fastq.App(server.url, namespace=namespace)
    r = redis.Redis.from_url(server.url)
    url = f"redis://{netns.host_ip}:{server.port}/0"
    reaper = subprocess.Popen(
        fastq_cmd(
            "reaper",
            "--app",
            "tests.apps.pool_jobs",
            "--namespace",
            namespace,
            "--interval",
            "0.2",
        ),
        env=subprocess_env(server.url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    n = 3000
    app.enqueue_many("note", [(i, 0.004) for i in range(n)], queue="q")
    pool = Pool(
        url,
        namespace,
        tmp_path / "pool.log",
        "-c",
        "2",
        "--batch",
        "20",
        "--lease",
        str(LEASE_S),
        "--no-reaper",
        wrap=netns.wrap,
    )
    try:
        pool.wait_children(2)
        wait_until(lambda: sum(noted_runs(pool).values()) >= 300, 60, "some progress")

        netns.link("down")
        time.sleep(0.3)  # what went through before the cut has run
        at_cut = held_args(r, namespace)
        assert at_cut, "the workers held nothing when the cut began"
        wait_until(lambda: app.stats("q")["inflight"] == 0, 30, "the leases taken back")
        # both workers gave up on their round trip (a lease and an idle timeout)
        time.sleep(LEASE_S + 5 + 1)
        netns.link("up")

        assert_recovered(app, r, pool, namespace, n, at_cut)
    finally:
        pool.kill()
        reaper.terminate()
        reaper.wait(timeout=10)
        r.close()
        app.close()
        server.cleanup()


def test_an_idle_worker_says_at_once_that_redis_stopped_answering(
    redis_server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Idle, a worker blocks on its queues' wake-up list: a Redis that stops
    answering (here SIGSTOPped) is said a couple of seconds past that wait's
    timeout, not when its socket gives up (a 60 s lease and its idle timeout later),
    and its return once."""
    app = fastq.App(redis_server.url, namespace=namespace)
    app.declare_queue("q")
    worker = Worker(app, ["q"], handle_signals=False, lease_s=60, idle_timeout_s=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    assert redis_server.process is not None
    pid = redis_server.process.pid

    def said(what: str) -> list[str]:
        return [m for m in caplog.messages if f"worker {worker.worker_id}: Redis {what}" in m]

    with caplog.at_level(logging.WARNING, logger="fastq.worker"):
        thread.start()
        client = redis.Redis.from_url(redis_server.url)
        blocked = lambda: client.info("clients")["blocked_clients"] > 0  # noqa: E731
        wait_until(blocked, 20, "the worker blocked on its wake-up list")
        client.close()
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            wait_until(lambda: bool(said("unavailable")), 30, "the worker to say so")
            assert time.monotonic() - stopped < 30  # its socket's timeout: 65 s
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: bool(said("back after")), 30, "the worker to say Redis is back")
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert len(said("unavailable")) == 1 and len(said("back after")) == 1, caplog.messages
    app.close()
