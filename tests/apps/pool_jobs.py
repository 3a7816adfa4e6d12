"""Jobs for pool fault tests: each run is recorded in Redis, with the pid that ran it."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Optional

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))
_leaked: list[bytes] = []


@app.on_worker_start
def _maybe_fail_to_boot() -> None:
    if os.environ.get("POOL_JOBS_FAIL_BOOT") == "1":
        raise RuntimeError("cannot open the SMTP connection pool")


def _record(i: int) -> None:
    pipe = app.redis.pipeline(transaction=False)
    pipe.hincrby(f"{app.namespace}:runs", str(i), 1)
    pipe.sadd(f"{app.namespace}:pids", os.getpid())
    pipe.execute()


@app.job(queue="q", backoff_s=0.1)
def work(i: int, sleep_s: float = 0.0) -> None:
    _record(i)
    if sleep_s:
        time.sleep(sleep_s)


@app.job(queue="q")
def note(i: int, sleep_s: float = 0.0) -> None:
    """Records its run in a file (``$POOL_JOBS_RUNS_FILE``), not in Redis: for tests
    that take Redis away, where a record in Redis could itself fail or be doubled."""
    if sleep_s:
        time.sleep(sleep_s)
    with open(os.environ["POOL_JOBS_RUNS_FILE"], "a") as f:
        f.write(f"{i}\n")  # one small append: atomic among the children


@app.job(queue="q")
def suicide(i: int) -> None:
    """Kills its own worker every time: a poison job."""
    _record(i)
    os._exit(1)


@app.job(queue="q")
def segv(i: int) -> None:
    """Crashes its worker as a C extension's bug would: SIGSEGV."""
    _record(i)
    os.kill(os.getpid(), signal.SIGSEGV)


@app.job(queue="q")
def exits(i: int) -> None:
    """Takes its worker down with sys.exit(3)."""
    _record(i)
    sys.exit(3)


@app.job(queue="other")
def stamp(i: int) -> None:
    """Notes when it started (Redis' clock, the one due times are in)."""
    seconds, micros = app.redis.time()
    app.redis.hset(f"{app.namespace}:stamps", str(i), seconds + micros / 1e6)


@app.job(queue="q")
def leak(i: int, mib: int) -> None:
    """Keeps ``mib`` MiB alive for as long as its process lives."""
    _record(i)
    _leaked.append(b"x" * (mib << 20))


@app.job(queue="q", retries=1, backoff_s=0.1, timeout_s=1.0)
def overrun(i: int) -> None:
    _record(i)
    time.sleep(30)


@app.job(queue="q")
def spin(i: int, cpu_s: float) -> None:
    """Burns CPU for ``cpu_s`` and notes when it ran (``pid start end``) in the runs
    file: a file append, not a write to Redis, whose reply (fsynced, on a busy host)
    may keep the job waiting long enough to look not CPU-bound."""
    started = time.time()
    deadline = time.perf_counter() + cpu_s
    while time.perf_counter() < deadline:
        pass
    _note(f"{os.getpid()} {started} {time.time()}")


@app.job(queue="q", retries=5, timeout_s=0.5)
def stubborn(i: int) -> None:
    """Blocks SIGALRM, as a long C call would ignore it: only the master can stop it."""
    _record(i)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(30)


def _note(line: str) -> None:
    with open(os.environ["POOL_JOBS_RUNS_FILE"], "a") as f:
        f.write(f"{line}\n")  # one small append: atomic among the children


@app.job(queue="q")
def long(i: int, sleep_s: float) -> None:
    """Notes its run in the runs file as it starts (so a run cut short counts too),
    then sleeps ``sleep_s``."""
    _note(str(i))
    time.sleep(sleep_s)


@app.job(queue="q", retries=3, backoff_s=0.1)
def flaky(i: int) -> None:
    """Notes its run in the runs file, and fails its first attempt: its retry is
    written by the worker's ack (a marker file says it failed once already)."""
    _note(str(i))
    marker = f"{os.environ['POOL_JOBS_RUNS_FILE']}.failed-{i}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    raise RuntimeError(f"flaky {i}: the first attempt fails")


@app.job(queue="q", delivery="at_most_once")
def note_once(i: int, sleep_s: float = 0.0) -> None:
    """An at-most-once job that notes its run in the runs file as it starts (so a
    run cut short counts too), then sleeps ``sleep_s``."""
    _note(str(i))
    if sleep_s:
        time.sleep(sleep_s)


@app.job(queue="q")
def hold(i: int) -> None:
    """Its first run writes its pid to a marker file and blocks (until its worker is
    killed); a later run notes ``i`` in the runs file and returns."""
    marker = os.environ["POOL_JOBS_RUNS_FILE"] + f".hold{i}"
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    _note(str(i))


def _record_link(chain: str, step: int) -> None:
    app.redis.hincrby(f"{app.namespace}:link_runs", f"{chain}#{step}", 1)


@app.job(queue="q", result_ttl_s=600)
def hop(prev: Optional[list[int]], chain: str, step: int) -> list[int]:
    """A link of a chain that passes its value on: the steps so far."""
    _record_link(chain, step)
    return [*(prev or []), step]


@app.job(queue="q")
def hop_plain(chain: str, step: int) -> None:
    """A link of a chain that keeps no value (noted finished: never run twice)."""
    _record_link(chain, step)
