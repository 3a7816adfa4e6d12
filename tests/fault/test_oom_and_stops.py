"""``fastq pool`` with Redis full for over a minute, and stopped by an impatient
operator: real processes, a real redis-server.

Redis over ``maxmemory`` refuses new jobs whole, but the scripts that free memory
or only keep the books (claim, ack, release, extend, reap) carry ``allow-oom``: a
full Redis still drains, leases are still extended, and no healthy child is killed
for it. A double Ctrl-C hands the job in hand back to the front of its queue as
interrupted: not a stall, not a failure.

The ``note``, ``long`` and ``flaky`` jobs record their runs in a file, so the
record never depends on the Redis these tests fill up.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, noted_runs, wait_until
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = [pytest.mark.fault]

OOM_HOLD_S = 65.0
LONG_JOB_S = 8.0


def _kill_fastq_children() -> None:
    for kid in psutil.Process().children(recursive=True):
        try:
            if kid.name().startswith("fastq-") or "fastq" in kid.cmdline()[1:3]:
                kid.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    """A durable server of the test's own that refuses writes once full."""
    s = RedisServer(
        appendonly=True,
        extra_args=["--maxmemory", "24mb", "--maxmemory-policy", "noeviction"],
    ).start()
    yield s
    s.cleanup()


def _fill(app: fastq.App) -> int:
    """Enqueue big jobs into queue ``filler`` (which nobody serves) until Redis
    refuses them; returns how many went in."""
    blob = "x" * 100_000
    written = 0
    for chunk in range(1000):
        calls = [(chunk * 10 + k, blob) for k in range(10)]
        try:
            written += len(app.enqueue_many("fill", calls, queue="filler"))
        except fastq.EnqueueError as exc:
            assert exc.fault == "out of memory", exc
            return written + len(exc.written)
    raise AssertionError("Redis never filled up")


class MemoryWatch(threading.Thread):
    """Samples whether Redis is over ``maxmemory`` (as its OOM check counts it)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.samples: list[int] = []  # bytes over maxmemory; <= 0: not full
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.25):
            mem = self.client.info("memory")
            counted = int(mem["used_memory"]) - int(mem.get("mem_not_counted_for_evict", 0))
            self.samples.append(counted - int(mem["maxmemory"]))

    def stop(self) -> list[int]:
        self.halt.set()
        self.join()
        self.client.close()
        return self.samples


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_redis_full_for_over_a_minute_mid_drain(
    full_redis: RedisServer, namespace: str, tmp_path: Path
) -> None:
    app = fastq.App(full_redis.url, namespace=namespace)
    admin = redis.Redis.from_url(full_redis.url)
    # 18 jobs of 8 s on 2 children: 72 s of work, longer than their 6 s lease;
    # between them, jobs that fail their first attempt (their retry is an ack's write)
    n_long = 18
    longs = list(range(n_long))
    flakies = list(range(100, 100 + n_long))
    for i, j in zip(longs, flakies):
        app.enqueue("long", [i, LONG_JOB_S], queue="q")
        app.enqueue("flaky", [j], queue="q")
    n = len(longs) + len(flakies)
    pool = Pool(
        full_redis.url,
        namespace,
        tmp_path / "pool.log",
        "-c",
        "2",
        "--lease",
        "6",
        "--child-timeout",
        "10",
    )
    try:
        before = {p.pid for p in pool.wait_children(2) + pool.wait_children(1, "reaper")}
        wait_until(lambda: len(noted_runs(pool)) >= 2, 20, "the first jobs to start")

        filled = _fill(app)
        assert filled > 0
        # the last chunk that went in may have crossed the mark by a few bytes only:
        # the mark goes 2 MiB below what Redis holds, so that acks freeing a little
        # memory cannot end the spell early
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", used - (2 << 20))
        full_since = time.monotonic()
        watch = MemoryWatch(full_redis.url)
        watch.start()

        # a producer meets it: refused whole, nothing written
        time.sleep(2)
        enqueued = app.stats("q")["enqueued"]  # only an enqueue counts it
        probe = "refused-while-full"
        with pytest.raises(fastq.RedisRefused) as refused:
            app.enqueue("note", [999], queue="q", job_id=probe)
        assert refused.value.fault == "out of memory"
        keys = app.keys("q")
        assert app.stats("q")["enqueued"] == enqueued
        assert not admin.hexists(keys.jobs, probe)
        assert admin.lpos(keys.ready, probe) is None and admin.zscore(keys.prio, probe) is None
        assert app.get_job(probe, queue="q") is None

        while time.monotonic() - full_since < OOM_HOLD_S:
            assert pool.proc.poll() is None, pool.log()
            time.sleep(0.5)
        samples = watch.stop()
        ran_while_full = sum(noted_runs(pool).values())
        for key in admin.scan_iter(match=f"{namespace}:{{filler}}:*", count=1000):
            admin.delete(key)
        admin.config_set("maxmemory", "24mb")

        try:
            wait_until(
                lambda: app.stats("q")["processed"] == n, 60, "the drain after Redis had room"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; runs {dict(noted_runs(pool))}\n{pool.log()}") from None
        after = {p.pid for p in pool.children() + pool.children("reaper")}
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
        _kill_fastq_children()
        admin.close()
        app.close()
    log = pool.log()
    print(f"Redis over maxmemory by {min(samples, default=0)}..{max(samples, default=0)} bytes")

    # Redis was full all along, and the drain went on meanwhile
    assert samples and min(samples) > 0, f"Redis was not full all along: {samples}"
    assert ran_while_full >= n_long, f"only {ran_while_full} runs while Redis was full"
    # no thread died, no healthy child was killed or replaced
    assert "Exception in thread" not in log and "Traceback" not in log, log
    assert "silent" not in log and "killing" not in log and " died " not in log, log
    assert before == after, f"a child was replaced:\n{log}"
    # no finished job ran again: each long job started once (a lease taken back would
    # start it twice); each flaky job ran twice, its failure and its retry
    ran = noted_runs(pool)
    assert ran == Counter({**{i: 1 for i in longs}, **{j: 2 for j in flakies}}), log
    stats = app.stats("q")
    assert stats["processed"] == n and stats["retried"] == len(flakies), stats
    assert (stats["stalled"], stats["dead"], stats["ready"], stats["inflight"]) == (0, 0, 0, 0)
    assert stats["scheduled"] == 0, stats
    # Every script the pool runs carries allow-oom, so a full Redis is no fault to it:
    # nothing to report. (At most once per process per episode in any case.)
    oom_lines = re.findall(r"fastq\.\w+: (.*?): Redis out of memory", log)
    assert all(n == 1 for n in Counter(oom_lines).values()), log
    assert oom_lines == [], log


def _log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _started(runs_file: Path) -> int:
    return len(runs_file.read_text().split()) if runs_file.exists() else 0


def _double_sigint(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """The operator's double Ctrl-C; returns the exit status and how long it took."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=15)
    return code, time.monotonic() - t0


@pytest.mark.timeout(120)
def test_double_ctrl_c_three_times_over_a_job_hands_it_back_as_interrupted(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], tmp_path: Path
) -> None:
    job_id = app.enqueue("long", [1, 4.0], queue="q")
    after_it = app.enqueue("note", [2], queue="q")  # behind it: it must stay behind
    ready = app.keys("q").ready
    log_path = tmp_path / "pool.log"
    runs_file = tmp_path / "runs.txt"  # every pool's (see Pool)
    for round_ in range(1, 4):
        offset = log_path.stat().st_size if log_path.exists() else 0
        pool = pools("-c", "1")
        assert pool.runs_file == runs_file
        wait_until(lambda n=round_: _started(runs_file) == n, 20, "the job to start")
        code, took = _double_sigint(pool.proc)
        log = _log_since(log_path, offset)
        assert code == 0, log
        assert took < 5, f"round {round_}: took {took:.1f} s to stop\n{log}"
        assert "Traceback" not in log and "crashed" not in log, log
        assert "SIGTERM again, interrupted" in log, log  # the worker's, at the second signal
        # back at the very front, neither dead nor scheduled
        assert [x.decode() for x in r.lrange(ready, 0, -1)] == [after_it, job_id], log
        stats = app.stats("q")
        assert (stats["interrupted"], stats["stalled"]) == (round_, 0), stats
        assert (stats["dead"], stats["scheduled"], stats["inflight"]) == (0, 0, 0), stats
        info = app.get_job(job_id, queue="q")
        assert info is not None and info.state == "queued", info
        assert (info.attempts, info.stalls) == (0, 0), info
    # a fourth pool runs it to completion, then the one behind it
    pool = pools("-c", "1")
    wait_until(lambda: app.stats("q")["processed"] == 2, 20, "the job to finish")
    assert pool.stop() == 0, pool.log()
    assert pool.runs_file.read_text().split() == ["1", "1", "1", "1", "2"]
    stats = app.stats("q")
    assert (stats["processed"], stats["dead"], stats["stalled"]) == (2, 0, 0), stats
    assert (stats["interrupted"], stats["ready"], stats["inflight"]) == (3, 0, 0), stats


@pytest.mark.timeout(60)
def test_double_ctrl_c_on_a_single_worker_hands_its_job_back_as_interrupted(
    app: fastq.App, r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    job_id = app.enqueue("long", [1, 4.0], queue="q")
    runs_file = tmp_path / "runs.txt"
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            fastq_cmd(
                "worker", "--app", "tests.apps.pool_jobs", "--namespace", app.namespace, "-q", "q"
            ),
            env=subprocess_env(redis_server.url, POOL_JOBS_RUNS_FILE=str(runs_file)),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _started(runs_file) == 1, 20, "the job to start")
        code, took = _double_sigint(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = log_path.read_text(errors="replace")
    assert code == 0, log
    assert took < 3, f"took {took:.1f} s to stop\n{log}"
    assert "Traceback" not in log, log
    assert "interrupted" in log, log
    assert [x.decode() for x in r.lrange(app.keys("q").ready, 0, -1)] == [job_id]
    stats = app.stats("q")
    assert (stats["interrupted"], stats["stalled"], stats["inflight"]) == (1, 0, 0), stats
    assert (stats["dead"], stats["scheduled"], stats["processed"]) == (0, 0, 0), stats
