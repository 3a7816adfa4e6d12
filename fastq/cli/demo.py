"""``fastq demo``: a mailing blast of fake emails, enqueued and drained for real.

This module is also the demo's app: workers load it with ``--app fastq.cli.demo``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Optional

import redis

import fastq
from fastq.cli.progress import make_view, tally
from fastq.protocol import control
from fastq.testing.redis_server import RedisServer

app = fastq.App(
    os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:6379/0"), namespace="fastq-demo"
)


@app.job(queue="mailer", retries=3, backoff_s=0.05)
def send_email(to: str, subject: str, body: str) -> None:
    """A stand-in for an SMTP call: build the message, hand it to nobody."""
    message = f"To: {to}\r\nSubject: {subject}\r\n\r\n{body}"
    if "@" not in to or not message:
        raise fastq.Fail(f"invalid address {to!r}")


def _delete_namespace(namespace: str) -> None:
    # Redis went away: the error that matters was already raised
    with contextlib.suppress(redis.RedisError):
        control.delete_namespace(app.redis, namespace)


def run_demo(
    redis_url: Optional[str], jobs: int = 30_000, batch: int = 100, workers: int = 2
) -> int:
    """Enqueue ``jobs`` fake emails, drain them with ``fastq pool -c workers``,
    print the figures, stop the pool. Returns the exit status."""
    # with an append-only file, as Redis for jobs should be (and the pool's check of
    # Redis' persistence has nothing to warn of): a throwaway server, set up right
    server = None if redis_url else RedisServer(appendonly=True).start()
    url = redis_url or (server.url if server else "")
    namespace = f"fastq-demo-{os.getpid()}"
    app.configure(redis_url=url, namespace=namespace)
    pool = None
    try:
        calls = [
            (
                f"user{i}@example.com",
                "Your November newsletter",
                f"Hello user {i}, here is the news.",
            )
            for i in range(jobs)
        ]
        print(f"fastq demo: {'throwaway redis-server at ' + url if server else 'Redis at ' + url}")
        t0 = time.perf_counter()
        send_email.enqueue_many(calls)
        t_enqueue = time.perf_counter() - t0
        print(f"enqueued {jobs:,} emails in {t_enqueue:.2f}s ({jobs / t_enqueue:,.0f} jobs/s)")

        cmd = [
            sys.executable,
            "-m",
            "fastq",
            "--log-level",
            "WARNING",
            "pool",
            "-c",
            str(workers),
            "--app",
            "fastq.cli.demo",
            "--namespace",
            namespace,
            "-q",
            "mailer",
            "--batch",
            str(batch),
        ]
        t0 = time.perf_counter()
        pool = subprocess.Popen(cmd, env=dict(os.environ, FASTQ_REDIS_URL=url))
        stats = start = app.stats("mailer")
        view = make_view("mailer")  # the progress bar of `fastq wait`
        while stats["processed"] + stats["dead"] < jobs and pool.poll() is None:
            time.sleep(0.01)
            stats = app.stats("mailer")
            view.update(tally(start, stats), stats["processed"] / (time.perf_counter() - t0))
        t_drain = time.perf_counter() - t0
        view.update(tally(start, stats), stats["processed"] / t_drain, final=True)
        view.close()
        pool.send_signal(signal.SIGTERM)
        code = pool.wait(timeout=60)
        print(
            f"sent with `fastq pool -c {workers}` in {t_drain:.2f}s "
            f"({stats['processed'] / t_drain:,.0f} jobs/s, including the pool's start-up)"
        )
        print(
            f"processed={stats['processed']} failed={stats['failed']} dead={stats['dead']} "
            f"ready={stats['ready']} inflight={stats['inflight']}"
        )
        ok = code == 0 and stats["processed"] == jobs
        if not ok:
            print("fastq demo: FAILED", file=sys.stderr)
        return 0 if ok else 1
    finally:
        if pool is not None and pool.poll() is None:
            pool.kill()
        if server is None:
            _delete_namespace(namespace)
        app.close()
        if server is not None:
            server.cleanup()
