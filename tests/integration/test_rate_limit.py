"""A queue's global rate limit as users set it and workers obey it, on a real server:
pools on one queue, in-process workers, bad input, the CLI.

No test here measures speed. The bound asserted on job starts follows from the claim's
GCRA alone, whatever the box's load: see ``assert_starts_within_the_limit``.
"""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from fastq.validate import MAX_RATE, RateLimit
from fastq.worker.pump import Pump
from tests.support.keys import namespace_keys
from tests.support.processes import fastq_cmd, run_cli, subprocess_env
from tests.support.workers import drain

HOUR_MS = 3_600_000


def starts(r: redis.Redis, namespace: str) -> list[tuple[int, int]]:
    """``(i, start time in µs on Redis' clock)`` of every run of ``rate_jobs.tick``."""
    out = []
    for raw in r.lrange(f"{namespace}:starts", 0, -1):
        i, at_us = raw.split()
        out.append((int(i), int(at_us)))
    return out


def assert_starts_within_the_limit(
    at_us: list[int], rate: int, period_ms: int, burst: int, workers: int
) -> None:
    """The claim's GCRA lets at most ``burst + W / T`` jobs be claimed in any window of
    length W (T = period / rate). A job starts after its claim, on the same clock, and a
    worker holds at most ``burst`` claimed jobs not started yet (a claim takes at most
    the tokens there are, a worker runs its batch before it claims again, and nothing
    is claimed ahead on a limited queue). So the starts in any window [s_i, s_j] are at
    most ``burst + (s_j - s_i) / T + workers * burst``, plus one for rounding to the µs."""
    at_us = sorted(at_us)
    interval_us = period_ms * 1000 / rate
    slack = burst + workers * burst + 1
    for i in range(len(at_us)):
        for j in range(i, len(at_us)):
            in_window = j - i + 1
            allowed = (at_us[j] - at_us[i]) / interval_us + slack
            assert in_window <= allowed, (
                f"{in_window} starts within {(at_us[j] - at_us[i]) / 1000:.1f} ms: the limit "
                f"{rate}/{period_ms} ms (burst {burst}) with {workers} workers allows "
                f"{math.floor(allowed)}"
            )


class RatePool:
    """A ``fastq pool`` subprocess serving ``q`` of ``tests.apps.rate_jobs``."""

    def __init__(self, url: str, namespace: str, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                fastq_cmd(
                    "pool",
                    "--app",
                    "tests.apps.rate_jobs",
                    "--namespace",
                    namespace,
                    "-q",
                    "q",
                    *args,
                ),
                env=subprocess_env(url),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for kid in kids:
            with contextlib.suppress(psutil.NoSuchProcess):
                kid.kill()


@pytest.fixture
def rate_pools(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., RatePool]]:
    started: list[RatePool] = []

    def start(*args: str) -> RatePool:
        pool = RatePool(redis_server.url, namespace, tmp_path / f"pool{len(started)}.log", *args)
        started.append(pool)
        return pool

    yield start
    for pool in started:
        pool.kill()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_global_limit_holds_across_three_pools_on_one_queue(
    redis_server: RedisServer,
    app: fastq.App,
    r: redis.Redis,
    rate_pools: Callable[..., RatePool],
) -> None:
    n, rate, burst, pools, children = 60, 20, 1, 3, 2
    app.enqueue_many("tick", [(i,) for i in range(n)], queue="q")
    app.set_rate_limit("q", rate, per_s=1, burst=burst)
    started = [
        rate_pools("-c", str(children), *(() if p == 0 else ("--no-reaper",))) for p in range(pools)
    ]
    try:
        wait_for(lambda: r.llen(f"{app.namespace}:starts") >= n, 120, f"{n} job starts")
    finally:
        for pool in started:
            pool.stop()
    runs = starts(r, app.namespace)
    assert sorted(i for i, _ in runs) == list(range(n))  # each job once
    assert_starts_within_the_limit([at for _, at in runs], rate, 1000, burst, pools * children)
    logs = "".join(p.log_path.read_text(errors="replace") for p in started)
    assert "Traceback" not in logs


def test_the_bound_check_catches_a_limit_not_kept() -> None:
    """The check above can fail: 60 starts in 1.5 s break a 20/s limit."""
    at_us = [i * 25_000 for i in range(60)]  # 40/s
    with pytest.raises(AssertionError, match="starts within"):
        assert_starts_within_the_limit(at_us, 20, 1000, 1, 6)
    assert_starts_within_the_limit([i * 50_000 for i in range(60)], 20, 1000, 1, 6)


def test_a_burst_worker_waits_for_tokens_rather_than_take_the_queue_for_empty(
    app: fastq.App, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []

    @app.job(queue="q")
    def job(i: int) -> None:
        ran.append(i)

    n = 12
    app.enqueue_many("job", [(i,) for i in range(n)], queue="q")
    app.set_rate_limit("q", 20, per_s=1, burst=1)
    claims = 0
    real_claim = Pump.claim

    def counting_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return real_claim(self, *args, **kwargs)

    monkeypatch.setattr(Pump, "claim", counting_claim)
    drain(app, ["q"])
    assert sorted(ran) == list(range(n))
    # one claim that gets the token, one throttled that sleeps until the next: a
    # worker polling a throttled queue would make hundreds
    assert claims <= 3 * n + 5, claims


def test_a_throttled_queue_does_not_hold_up_another_and_a_burst_worker_stops_on_a_far_token(
    app: fastq.App,
) -> None:
    ran: list[str] = []

    @app.job(queue="limited")
    def slow_lane(i: int) -> None:
        ran.append(f"limited{i}")

    @app.job(queue="free")
    def fast_lane(i: int) -> None:
        ran.append(f"free{i}")

    app.enqueue_many("slow_lane", [(i,) for i in range(3)], queue="limited")
    app.enqueue_many("fast_lane", [(i,) for i in range(5)], queue="free")
    app.set_rate_limit("limited", 1, per_s=3600, burst=1)  # the next token in an hour
    drain(app, ["limited", "free"], burst_horizon_s=1.0)
    assert sorted(ran) == ["free0", "free1", "free2", "free3", "free4", "limited0"]
    stats = app.stats("limited")
    assert (stats["ready"], stats["processed"]) == (2, 1)


def test_no_claim_ahead_on_a_limited_queue(app: fastq.App, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.job(queue="q")
    def noop(i: int) -> None:
        pass

    @app.job(queue="free")
    def free(i: int) -> None:
        pass

    ahead: list[str] = []
    real_ahead = Pump.claim_ahead

    def spying(self: Any, queues: list[str], n: int, peek: Any = ()) -> None:
        ahead.extend(queues)
        real_ahead(self, queues, n, peek=peek)

    monkeypatch.setattr(Pump, "claim_ahead", spying)
    app.enqueue_many("free", [(i,) for i in range(3000)], queue="free")
    drain(app, ["free"])
    assert ahead, "quick no-op jobs are claimed ahead on a queue without a limit"
    ahead.clear()
    # a limit far above what the worker can do, so batches are as big as without it
    app.enqueue_many("noop", [(i,) for i in range(3000)], queue="q")
    app.set_rate_limit("q", 100_000, per_s=1, burst=1000)
    drain(app, ["q"])
    assert app.stats("q")["processed"] == 3000
    assert ahead == []


def test_stats_and_rate_limit_show_the_limit(app: fastq.App) -> None:
    app.enqueue("j", queue="mailer")
    stats = app.stats("mailer")
    assert (stats["rate"], stats["rate_period_ms"], stats["rate_burst"]) == (0, 0, 0)
    assert app.rate_limit("mailer") is None
    app.set_rate_limit("mailer", 14, per_s=1)
    assert app.rate_limit("mailer") == RateLimit(14, 1000, 1)  # 50 ms at 14/s: burst 1
    assert str(app.rate_limit("mailer")) == "14/s (burst 1)"
    stats = app.stats("mailer")
    assert (stats["rate"], stats["rate_period_ms"], stats["rate_burst"]) == (14, 1000, 1)
    app.set_rate_limit("mailer", 600, per_s=60, burst=10)
    assert str(app.rate_limit("mailer")) == "600/m (burst 10)"
    app.set_rate_limit("mailer", 100, per_s=1)
    assert app.rate_limit("mailer") == RateLimit(100, 1000, 5)
    app.set_rate_limit("mailer", None)
    assert app.rate_limit("mailer") is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rate": 0}, ValueError, "rate must be within 1..1000000"),
        ({"rate": -5}, ValueError, "rate must be within"),
        ({"rate": MAX_RATE + 1}, ValueError, "rate must be within"),
        ({"rate": 1.5}, TypeError, "rate must be an int"),
        ({"rate": float("nan")}, TypeError, "rate must be an int"),
        ({"rate": float("inf")}, TypeError, "rate must be an int"),
        ({"rate": True}, TypeError, "rate must be an int"),
        ({"rate": "14"}, TypeError, "rate must be an int"),
        ({"rate": 14, "per_s": 0}, ValueError, "per_s must be a finite number"),
        ({"rate": 14, "per_s": -1}, ValueError, "per_s must be a finite number"),
        ({"rate": 14, "per_s": float("nan")}, ValueError, "per_s must be a finite number"),
        ({"rate": 14, "per_s": float("inf")}, ValueError, "per_s must be a finite number"),
        ({"rate": 14, "per_s": 10**9}, ValueError, "per_s must be a finite number"),
        ({"rate": 14, "per_s": 0.0005}, ValueError, "whole milliseconds"),
        ({"rate": 14, "per_s": "1"}, TypeError, "per_s must be a number"),
        ({"rate": 10_000, "per_s": 0.001}, ValueError, "above 1000000 jobs a second"),
        ({"rate": 14, "burst": 0}, ValueError, "burst must be within"),
        ({"rate": 14, "burst": -1}, ValueError, "burst must be within"),
        ({"rate": 14, "burst": 10**7}, ValueError, "burst must be within"),
        ({"rate": 14, "burst": 2.0}, TypeError, "burst must be an int"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_written(
    app: fastq.App,
    r: redis.Redis,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    app.enqueue("j", queue="mailer")
    app.set_rate_limit("mailer", 7, per_s=1)
    before = {key: r.dump(key) for key in namespace_keys(r, app.namespace)}
    rate = kwargs.pop("rate")
    with pytest.raises(error, match=message):
        app.set_rate_limit("mailer", rate, **kwargs)
    assert {key: r.dump(key) for key in namespace_keys(r, app.namespace)} == before


@pytest.mark.parametrize(
    ("queue", "message"), [("nope", "unknown queue 'nope'"), ("a:b", "queue name")]
)
def test_a_limit_on_an_unknown_or_bad_queue_is_refused_and_nothing_is_written(
    app: fastq.App, r: redis.Redis, queue: str, message: str
) -> None:
    app.enqueue("j", queue="mailer")
    before = {key: r.dump(key) for key in namespace_keys(r, app.namespace)}
    with pytest.raises(ValueError, match=message):
        app.set_rate_limit(queue, 14)
    with pytest.raises(ValueError, match=message):
        app.set_rate_limit(queue, None)
    assert {key: r.dump(key) for key in namespace_keys(r, app.namespace)} == before


# -- the CLI -------------------------------------------------------------------------


def test_cli_limit_sets_shows_and_lifts(redis_server: RedisServer, app: fastq.App) -> None:
    app.enqueue_many("count", [(i,) for i in range(3)], queue="count")
    base = ("--app", "tests.apps.counting", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "limit", *base, "count", "14/s")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "count: at most 14/s (burst 1), across every worker"
    assert app.rate_limit("count") == RateLimit(14, 1000, 1)
    proc = run_cli(redis_server.url, "limit", *base, "count", "600/m", "--burst", "10")
    assert proc.returncode == 0 and app.rate_limit("count") == RateLimit(600, 60_000, 10)
    proc = run_cli(redis_server.url, "limit", *base, "count")
    assert proc.stdout.strip() == "count: 600/m (burst 10)"
    proc = run_cli(redis_server.url, "stats", *base, "-q", "count")
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(" limit=600/m(burst10)")
    proc = run_cli(redis_server.url, "limit", *base, "count", "off")
    assert proc.returncode == 0 and app.rate_limit("count") is None
    proc = run_cli(redis_server.url, "stats", *base, "-q", "count")
    assert proc.stdout.rstrip().endswith(" limit=off")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("count", "0/s"), "rate must be within 1..1000000"),
        (("count", "--", "-5/s"), "is not a rate"),
        (("count", "abc"), "is not a rate"),
        (("count", "1e3/s"), "is not a rate"),
        (("count", "14/x"), "is not a rate"),
        (("count", "nan/s"), "is not a rate"),
        (("count", "99999999/s"), "rate must be within"),
        (("count", "2000000/s"), "rate must be within"),
        (("count", "14/s", "--burst", "0"), "burst must be within"),
        (("count", "14/s", "--burst", "x"), "invalid int value"),
        (("count", "off", "--burst", "3"), "--burst goes with a rate"),
        (("nope", "14/s"), "unknown queue 'nope'"),
        (("a:b", "14/s"), "queue name"),
    ],
)
def test_cli_limit_refuses_bad_input_in_one_line_and_writes_nothing(
    redis_server: RedisServer, app: fastq.App, r: redis.Redis, args: tuple[str, ...], message: str
) -> None:
    app.enqueue("count", (1,), queue="count")
    before = {key: r.dump(key) for key in namespace_keys(r, app.namespace)}
    base = ("--app", "tests.apps.counting", "--namespace", app.namespace)
    proc = run_cli(redis_server.url, "limit", *base, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastq: error: ") and message in lines[0]
    assert {key: r.dump(key) for key in namespace_keys(r, app.namespace)} == before


# -- per-key limits (rate_key) ---------------------------------------------------------


def test_a_job_over_its_keys_limit_waits_once_in_its_own_slot_without_an_attempt(
    app: fastq.App, r: redis.Redis
) -> None:
    ran: list[tuple[str, int]] = []

    @app.job(queue="mail", rate_key="smtp:{account}", rate=1, per_s=3600, burst=2)
    def send(account: str, i: int) -> None:
        ran.append((account, i))

    ids = app.enqueue_many("send", [(a, i) for a in ("a", "b") for i in range(3)], queue="mail")
    drain(app, ["mail"], burst_horizon_s=0.5)
    # two of each account at once (the burst); the third waits for its token, an hour
    assert sorted(ran) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    k = app.keys("mail")
    waiting = {
        job_id.decode(): score for job_id, score in r.zrange(k.scheduled, 0, -1, withscores=True)
    }
    assert set(waiting) == {ids[2], ids[5]}
    seconds, micros = r.time()
    now_ms = seconds * 1000 + micros // 1000
    # due an hour after its token was reserved (and its ack written), not earlier
    assert all(HOUR_MS - 60_000 < due - now_ms <= HOUR_MS for due in waiting.values()), waiting
    for job_id in waiting:
        info = app.get_job(job_id, "mail")
        assert info is not None and info.attempts == 0 and info.state == "scheduled"
        assert b'"rate_slot":' in info.raw  # its token is reserved
    assert app.stats("mail")["retried"] == 2 and app.stats("mail")["failed"] == 0
    # its slot comes (moved to now here): it starts without taking another token,
    # though the key has none for another hour
    r.zadd(k.scheduled, {job_id: 0 for job_id in waiting})
    drain(app, ["mail"], burst_horizon_s=0.5)
    assert sorted(ran) == [(a, i) for a in ("a", "b") for i in range(3)]
    assert app.stats("mail")["retried"] == 2  # not rescheduled again
    assert r.exists(k.rate_state("smtp:a")) and r.exists(k.rate_state("smtp:b"))


def test_jobs_of_a_rate_key_all_run_once_at_a_real_rate(app: fastq.App) -> None:
    ran: list[tuple[str, int]] = []

    @app.job(queue="mail", rate_key="api:{token}", rate=20, per_s=1, burst=1)
    def call(token: str, i: int, retries_left: int = 0) -> None:
        ran.append((token, i))

    jobs = [(t, i) for t in ("x", "y") for i in range(4)]
    app.enqueue_many("call", jobs, queue="mail")
    drain(app, ["mail"], burst_horizon_s=2.0)
    assert sorted(ran) == sorted(jobs)
    stats = app.stats("mail")
    assert (stats["processed"], stats["failed"], stats["dead"]) == (8, 0, 0)


def test_one_key_given_a_rate_of_its_own_waits_while_the_others_run(
    app: fastq.App, r: redis.Redis
) -> None:
    ran: list[tuple[str, int]] = []

    @app.job(queue="mail", rate_key="dom:{domain}", rate=1000, per_s=1)
    def send(domain: str, i: int) -> None:
        ran.append((domain, i))

    app.set_key_rate_limit("dom:slow.example", 1, per_s=3600, burst=1)
    assert app.key_rate_limits() == {"dom:slow.example": RateLimit(1, 3_600_000, 1)}
    jobs = [(d, i) for d in ("slow.example", "fast.example") for i in range(3)]
    ids = app.enqueue_many("send", jobs, queue="mail")
    drain(app, ["mail"], burst_horizon_s=0.5)
    # the slow key: one start, its next token an hour away; the other at its job's rate
    assert sorted(ran) == [("fast.example", 0), ("fast.example", 1), ("fast.example", 2)] + [
        ("slow.example", 0)
    ]
    waiting = {j.decode() for j in r.zrange(app.keys("mail").scheduled, 0, -1)}
    assert waiting == {ids[1], ids[2]}
    # lifted: the key is back to its job's rate (the two waiting keep their slot)
    app.set_key_rate_limit("dom:slow.example", None)
    assert app.key_rate_limits() == {}
    app.enqueue("send", ("slow.example", 9), queue="mail")
    drain(app, ["mail"], burst_horizon_s=0.5)
    assert ("slow.example", 9) in ran


def test_a_key_given_20_per_second_never_starts_more_in_any_second(
    app: fastq.App, r: redis.Redis
) -> None:
    @app.job(queue="mail", rate_key="dom:{domain}", rate=100_000, per_s=1, burst=1000)
    def send(domain: str, i: int) -> None:
        seconds, micros = app.redis.time()
        app.redis.rpush(f"{app.namespace}:starts:{domain}", seconds * 1_000_000 + micros)

    app.set_key_rate_limit("dom:slow.example", 20, per_s=1, burst=1)
    n_slow, n_fast = 50, 500
    app.enqueue_many("send", [("slow.example", i) for i in range(n_slow)], queue="mail")
    app.enqueue_many("send", [("fast.example", i) for i in range(n_fast)], queue="mail")
    drain(app, ["mail"], burst_horizon_s=3.0)
    slow = sorted(int(t) for t in r.lrange(f"{app.namespace}:starts:slow.example", 0, -1))
    fast = sorted(int(t) for t in r.lrange(f"{app.namespace}:starts:fast.example", 0, -1))
    assert (len(slow), len(fast)) == (n_slow, n_fast)
    # the slow key's tokens are 50 ms apart (burst 1): 20 in any second. A job waiting
    # for its token starts when a claim brings it back, a little late, so starts may
    # bunch: a second holds its 20, and at most 3 late ones of the second before
    most = max(sum(1 for t in slow[i:] if t < start + 1_000_000) for i, start in enumerate(slow))
    assert most <= 20 + 3, most
    # its 50 starts are spread over at least (50 - 1) / 20 s; the other key's were not
    # held back (all done before the slow key's tenth start is due)
    assert slow[-1] - slow[0] >= (n_slow - 1) * 50_000 - 1000
    assert fast[-1] < slow[0] + 10 * 50_000 + 2_000_000


@pytest.mark.parametrize("kind", ["sync", "async", "threads"])
def test_a_job_told_to_slow_down_rests_its_key_while_other_keys_run(
    app: fastq.App, r: redis.Redis, kind: str
) -> None:
    """Retry(slow_key=True), an SMTP server's 421: the job's key starts nothing for
    delay_s, on any worker, while other keys of the same job run; the job itself
    comes back after it (an attempt counted, as any Retry)."""
    rest_s = 1.5

    def body(host: str, i: int) -> None:
        seconds, micros = app.redis.time()
        app.redis.rpush(f"{app.namespace}:starts", f"{host} {i} {seconds * 1_000_000 + micros}")
        if host == "busy.example" and i == 0 and fastq.current_job().attempt == 1:
            # the key's other jobs come due once this run has asked for the rest (a
            # job of the key already running when it asks runs on)
            later = [("busy.example", i) for i in range(1, 4)]
            app.enqueue_many("send", later, queue="mail", delay_s=0.5)
            raise fastq.Retry(delay_s=rest_s, slow_key=True)

    limit: dict[str, Any] = {"queue": "mail", "rate_key": "smtp:{host}", "rate": 1000, "burst": 1}
    if kind == "async":

        @app.job(**limit)
        async def send(host: str, i: int) -> None:
            body(host, i)

    else:
        app.job(name="send", **limit)(body)
    runner = {"sync": {}, "async": {"async_jobs": 4}, "threads": {"threads": 4}}[kind]

    app.enqueue("send", ("busy.example", 0), queue="mail")
    app.enqueue_many("send", [("calm.example", i) for i in range(4)], queue="mail")
    drain(app, ["mail"], batch_size=1, burst_horizon_s=rest_s + 2, **runner)
    starts = [line.decode().split() for line in r.lrange(f"{app.namespace}:starts", 0, -1)]
    at = [(host, int(i), int(us)) for host, i, us in starts]
    told = next(us for host, i, us in at if (host, i) == ("busy.example", 0))
    busy_after = [us for host, i, us in at if host == "busy.example" and us > told]
    calm = [us for host, _, us in at if host == "calm.example"]
    # every other busy job, and the retry, waited out the rest; the calm ones did not
    assert len(busy_after) == 4
    assert min(busy_after) - told >= rest_s * 1_000_000 - 5_000, (min(busy_after) - told) / 1e6
    assert max(calm) - told < rest_s * 1_000_000
    info = app.stats("mail")
    assert (info["processed"], info["dead"]) == (8, 0)


def test_slow_key_needs_a_delay_and_a_job_without_a_key_only_warns(
    app: fastq.App, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="needs delay_s"):
        fastq.Retry(slow_key=True)
    with pytest.raises(TypeError, match="slow_key must be a bool"):
        fastq.Retry(1.0, slow_key=1)  # type: ignore[arg-type]

    @app.job(queue="mail", retries=1)
    def plain(i: int) -> None:
        if fastq.current_job().attempt == 1:
            raise fastq.Retry(delay_s=0.1, slow_key=True)

    app.enqueue("plain", (1,), queue="mail")
    with caplog.at_level("WARNING", logger="fastq.worker"):
        drain(app, ["mail"], burst_horizon_s=2)
    assert "Retry(slow_key=True), but no key rests: the job has no rate_key" in caplog.text
    assert app.stats("mail")["processed"] == 1


def test_key_limits_from_the_command_line(app: fastq.App, redis_server: RedisServer) -> None:
    ns = ["--namespace", app.namespace]

    def limit(*args: str) -> str:
        out = run_cli(redis_server.url, "limit", *ns, *args)
        assert out.returncode == 0, out.stderr
        return str(out.stdout)

    assert limit("--keys") == "no key has a rate of its own\n"
    assert limit("--key", "dom:slow.example", "20/s") == (
        "dom:slow.example: at most 20/s (burst 1), across every worker "
        "(other keys: their jobs' own rate)\n"
    )
    assert app.key_rate_limits() == {"dom:slow.example": RateLimit(20, 1000, 1)}
    assert limit("--key", "dom:slow.example") == "dom:slow.example: 20/s (burst 1)\n"
    assert limit("--keys") == "dom:slow.example: 20/s (burst 1)\n"
    assert limit("--key", "dom:slow.example", "off") == "dom:slow.example: its jobs' own rate\n"
    assert app.key_rate_limits() == {}
    for args, said in (
        (["--key", "dom:x", "20/s", "extra"], "with --key, give only the rate"),
        (["--key", "", "20/s"], "a rate key must be 1 to 200 characters"),
        (["--key", "dom:x", "fast"], "rate"),
        (["--keys", "mail"], "--keys lists every key's limit"),
        ([], "give a queue"),
    ):
        out = run_cli(redis_server.url, "limit", *ns, *args)
        assert out.returncode == 2, (args, out)
        assert said in out.stderr, (args, out.stderr)
    assert app.key_rate_limits() == {}


def test_bad_key_limits_are_refused_and_nothing_is_written(app: fastq.App, r: redis.Redis) -> None:
    for key, rate, error, said in (
        ("", 5, ValueError, "1 to 200 characters"),
        ("k" * 201, 5, ValueError, "1 to 200 characters"),
        ("dom:\nx", 5, ValueError, "printable"),
        (5, 5, TypeError, "must be a str"),
        ("dom:x", 0, ValueError, "rate must be within"),
        ("dom:x", True, TypeError, "rate must be an int"),
    ):
        with pytest.raises(error, match=said):
            app.set_key_rate_limit(key, rate)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per_s must be"):
        app.set_key_rate_limit("dom:x", 5, per_s=float("inf"))
    assert namespace_keys(r, app.namespace) == []


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_key": "smtp:{account}"}, ValueError, "needs both rate_key= and rate="),
        ({"rate": 5}, ValueError, "needs both rate_key= and rate="),
        ({"rate_key": "smtp:{acount}", "rate": 5}, ValueError, "'acount' is not a parameter"),
        ({"rate_key": "smtp:{0}", "rate": 5}, ValueError, "not a plain {name}"),
        ({"rate_key": "smtp:{account.x}", "rate": 5}, ValueError, "not a plain {name}"),
        ({"rate_key": "smtp:{account!r}", "rate": 5}, ValueError, "not a plain {name}"),
        ({"rate_key": "smtp:{account:>9}", "rate": 5}, ValueError, "not a plain {name}"),
        ({"rate_key": "smtp:{account", "rate": 5}, ValueError, "not a format string"),
        ({"rate_key": "", "rate": 5}, ValueError, "1 to 200 characters"),
        ({"rate_key": 5, "rate": 5}, TypeError, "rate_key must be a str"),
        ({"rate_key": "k", "rate": 0}, ValueError, "rate must be within"),
        ({"rate_key": "k", "rate": 5, "per_s": float("nan")}, ValueError, "per_s must be"),
        ({"rate_key": "k", "rate": 5, "burst": -1}, ValueError, "burst must be within"),
    ],
)
def test_bad_per_key_limits_are_refused_at_registration(
    app: fastq.App, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    def send(account: str) -> None:
        pass

    with pytest.raises(error, match=message):
        app.job(queue="mail", **options)(send)
    assert "send" not in app.registry


def test_a_reserved_slot_is_spent_by_its_run_a_retry_takes_a_new_token(
    app: fastq.App, r: redis.Redis
) -> None:
    # backoff 30 s: no retry comes due within a drain however slow the box
    @app.job(queue="mail", rate_key="smtp:{account}", rate=1, per_s=3600, burst=1, backoff_s=30)
    def flaky(account: str) -> None:
        raise RuntimeError("relay said 451")

    first, second = app.enqueue_many("flaky", [("a",), ("a",)], queue="mail")
    drain(app, ["mail"], burst_horizon_s=0)
    k = app.keys("mail")
    r.zadd(k.scheduled, {second: 0})  # its slot comes
    drain(app, ["mail"], burst_horizon_s=0)
    info = app.get_job(second, "mail")
    assert info is not None and info.attempts == 1 and info.last_error is not None
    assert b"rate_slot" not in info.raw  # its next attempt waits for a token of its own
    assert app.get_job(first, "mail") is not None


def test_a_sharded_queues_limit_is_the_whole_queues_and_its_shards_share_it(
    app: fastq.App, r: redis.Redis
) -> None:
    """Each of 4 shards takes a quarter of the limit: together they keep it, and,
    since a blast is spread evenly, they reach it (a worker moves on to another
    shard while one waits for its next token)."""
    shards, n, rate, burst = 4, 120, 40, 4

    @app.job(queue="mailer", shards=shards)
    def tick(i: int) -> None:
        seconds, micros = app.redis.time()
        app.redis.rpush(f"{app.namespace}:starts", f"{i} {seconds * 1_000_000 + micros}")

    tick.enqueue_many([(i,) for i in range(n)])
    app.set_rate_limit("mailer", rate, per_s=1, burst=burst)
    assert app.rate_limit("mailer") == RateLimit(rate, 1000, burst)  # the whole queue's
    assert app.stats("mailer")["rate"] == rate
    drain(app, ["mailer"])
    runs = starts(r, app.namespace)
    assert sorted(i for i, _ in runs) == list(range(n))
    at_us = sorted(at for _, at in runs)
    # each shard's burst is ceil(burst / shards): shards of them at once at most
    assert_starts_within_the_limit(at_us, rate, 1000, shards * math.ceil(burst / shards), 1)
    took_s = (at_us[-1] - at_us[0]) / 1e6
    # at the whole rate: (n - burst) / rate = 2.9 s; one shard's share would take 4 times as long
    assert took_s < 2 * (n - burst) / rate, f"{n} starts took {took_s:.1f} s"
