"""End-to-end benchmark: one fastq worker against a bare Redis baseline, in one run.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379), in this order, each scenario on its own keys:

1. bare enqueue   pipelined ``HSET jobs id payload`` + ``LPUSH ready id``
2. fastq enqueue  ``noop.enqueue_many(...)``
3. bare drain     one forked child: raw EVALSHA ack + claim, one round trip per batch
4. fastq drain    one forked child running ``fastq.worker.worker.Worker(..., burst=True)``
5. latency        an idle fastq worker child, jobs enqueued at a steady rate

Scenarios 1-4 run ``--repeat`` times and the best of each is reported. The ratios
(fastq / bare) are what to read: they come from the same run on the same machine.
The exit status depends only on correctness (every job ran, nothing left over),
never on the ratios.

    python -m bench.e2e_worker             # full run: 100,000 jobs, best of 3
    python -m bench.e2e_worker --quick     # CI smoke: 2,000 jobs, once
    python -m bench.e2e_worker --json out.json
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import orjson
import redis

import fastq
from bench.bare_consumer import BARE_ACK_LUA, BARE_CLAIM_LUA, QUEUE, BareKeys, bare_consume
from bench.harness import (
    BenchFailure,
    add_json_option,
    announce,
    bare_enqueue,
    check_bare_drained,
    run_child,
    wait_child,
    write_report,
)
from fastq.job import JobDef
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker

TARGET_DRAIN = 0.60  # fastq drain >= 60% of the bare drain
TARGET_ENQUEUE = 0.80  # enqueue_many >= 80% of the bare pipelined enqueue


# -- the jobs ---------------------------------------------------------------------

_latencies: list[float] = []


def noop(i: int) -> None:
    """The no-op job of the drain scenarios."""


def stamp(t: float) -> None:
    """The latency job: how long since it was enqueued (same host, same clock)."""
    _latencies.append(time.time() - t)


def make_app(url: str, namespace: str) -> tuple[fastq.App, JobDef[None], JobDef[None]]:
    """A fresh app on its own namespace, with the ``noop`` and ``stamp`` jobs."""
    app = fastq.App(url, namespace=namespace)
    return app, app.job(queue=QUEUE)(noop), app.job(queue=QUEUE)(stamp)


# -- forking ----------------------------------------------------------------------


def timed_child(body: Callable[[], None], what: str) -> float:
    """Seconds from fork to the child's exit, as the parent sees them."""
    gc.collect()
    t0 = time.perf_counter()
    pid = run_child(body)
    wait_child(pid, what)
    return time.perf_counter() - t0


# -- scenarios 1-4 ----------------------------------------------------------------


def fastq_enqueue(app: fastq.App, job: JobDef[None], n: int) -> float:
    app.redis.ping()  # connect before the clock starts
    gc.collect()
    t0 = time.perf_counter()
    ids = job.enqueue_many([(i,) for i in range(n)])
    elapsed = time.perf_counter() - t0
    del ids
    stats = app.stats(QUEUE)
    if stats["ready"] != n or stats["enqueued"] != n:
        raise BenchFailure(f"fastq enqueue: expected {n} ready jobs, stats say {stats}")
    return elapsed


def bare_drain(url: str, keys: BareKeys, n: int, batch: int, shas: tuple[str, str]) -> float:
    elapsed = timed_child(lambda: bare_consume(url, keys, batch, shas), "bare drain")
    check_bare_drained(url, keys, "bare drain")
    return elapsed


def fastq_drain(app: fastq.App, n: int, batch: int) -> float:
    def child() -> None:
        Worker(app, [QUEUE], batch_size=batch, burst=True).run()

    elapsed = timed_child(child, "fastq drain")
    stats = app.stats(QUEUE)
    if (stats["processed"], stats["ready"], stats["inflight"]) != (n, 0, 0):
        raise BenchFailure(
            f"fastq drain: expected processed={n}, ready=0, inflight=0; stats say {stats}"
        )
    return elapsed


# -- scenario 5 -------------------------------------------------------------------


def latency(
    app: fastq.App, job: JobDef[None], jobs: int, rate: float, batch: int
) -> dict[str, float]:
    """Enqueue ``jobs`` stamp jobs at ``rate`` jobs/s to an idle worker child;
    return the percentiles (ms) of enqueue-to-start."""
    fd, path = tempfile.mkstemp(prefix="fastq-bench-latency-", suffix=".json")
    os.close(fd)

    def child() -> None:
        _latencies.clear()
        try:
            # idle_timeout_s only bounds how long a SIGTERM waits for the blocked
            # BLPOP to return; the worker is woken by enqueue, not by the timeout.
            Worker(app, [QUEUE], batch_size=batch, idle_timeout_s=1.0).run()
        finally:
            with open(path, "wb") as f:
                f.write(orjson.dumps(_latencies))

    try:
        app.redis.ping()
        pid = run_child(child)
        try:
            time.sleep(0.2)  # let the worker connect and go idle on its wake-up key
            tick_s = 0.004  # a small group every few ms
            sent = 0
            t0 = time.perf_counter()
            while sent < jobs:
                due = min(jobs, int((time.perf_counter() - t0) * rate) + 1)
                if due > sent:
                    group = due - sent
                    job.enqueue_many([(time.time(),)] * group)
                    sent += group
                time.sleep(tick_s)
            send_s = time.perf_counter() - t0
            deadline = time.monotonic() + 30 + jobs / 1000
            while app.stats(QUEUE)["processed"] < jobs:
                if time.monotonic() > deadline:
                    raise BenchFailure(
                        f"latency: only {app.stats(QUEUE)['processed']} of {jobs} jobs ran"
                    )
                time.sleep(0.01)
        finally:
            os.kill(pid, signal.SIGTERM)
            wait_child(pid, "latency worker", timeout_s=15)
        with open(path, "rb") as f:
            seen = sorted(orjson.loads(f.read()))
    finally:
        os.unlink(path)
    if len(seen) != jobs:
        raise BenchFailure(f"latency: the worker recorded {len(seen)} jobs, expected {jobs}")

    def pct(p: float) -> float:
        return seen[min(len(seen) - 1, int(p / 100 * len(seen)))] * 1000

    return {
        "jobs": jobs,
        "rate_target": rate,
        "rate_actual": jobs / send_s,
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "max_ms": seen[-1] * 1000,
    }


# -- the run ----------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, help="jobs per scenario (default 100000)")
    p.add_argument("--batch", type=int, default=100, help="jobs per claim (default 100)")
    p.add_argument(
        "--repeat", type=int, help="runs of scenarios 1-4; best of each is kept (default 3)"
    )
    p.add_argument("--latency-jobs", type=int, help="jobs of the latency run (default 5000)")
    p.add_argument(
        "--rate", type=float, default=2000.0, help="latency enqueue rate, jobs/s (default 2000)"
    )
    add_json_option(p)
    p.add_argument(
        "--quick", action="store_true", help="CI smoke: 2000 jobs, 500 latency jobs, 1 run"
    )
    args = p.parse_args(argv)
    if args.jobs is None:
        args.jobs = 2000 if args.quick else 100_000
    if args.latency_jobs is None:
        args.latency_jobs = 500 if args.quick else 5000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.jobs < 1 or args.latency_jobs < 1 or args.repeat < 1 or args.rate <= 0:
        p.error("--jobs, --latency-jobs, --repeat and --rate must be positive")
    return args


def verdict(ratio: float, target: float) -> str:
    return "PASS" if ratio >= target else "BELOW"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, batch = args.jobs, args.batch
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq end-to-end benchmark",
            f"one worker, {n:,} no-op jobs, batch {batch}, best of {args.repeat}; "
            f"throwaway redis-server at {server.url}",
        )
        # Both sides run with their scripts already loaded (a long-lived producer
        # or worker has them): the bare scripts once here, fastq's likewise.
        shas = (client.script_load(BARE_CLAIM_LUA), client.script_load(BARE_ACK_LUA))
        scripts.load_all(client)

        runs: list[dict[str, float]] = []
        for rep in range(args.repeat):
            client.flushdb()
            keys = BareKeys(f"bare{rep}")
            app, noop_job, _ = make_app(server.url, f"fastq{rep}")
            try:
                run = {
                    "bare_enqueue_s": bare_enqueue(client, keys, n),
                    "fastq_enqueue_s": fastq_enqueue(app, noop_job, n),
                    "bare_drain_s": bare_drain(server.url, keys, n, batch, shas),
                    "fastq_drain_s": fastq_drain(app, n, batch),
                }
            finally:
                app.close()
            run.update({k[:-2] + "_jobs_s": n / v for k, v in list(run.items())})
            runs.append(run)
            print(
                f"  run {rep + 1}/{args.repeat}: enqueue bare {run['bare_enqueue_jobs_s']:,.0f}"
                f" fastq {run['fastq_enqueue_jobs_s']:,.0f} | drain bare"
                f" {run['bare_drain_jobs_s']:,.0f} fastq {run['fastq_drain_jobs_s']:,.0f} jobs/s"
            )

        best = {
            name: max(r[f"{name}_jobs_s"] for r in runs)
            for name in ("bare_enqueue", "fastq_enqueue", "bare_drain", "fastq_drain")
        }
        client.flushdb()
        app, _, stamp_job = make_app(server.url, "latency")
        try:
            lat = latency(app, stamp_job, args.latency_jobs, args.rate, batch)
        finally:
            app.close()
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        server.cleanup()

    enqueue_ratio = best["fastq_enqueue"] / best["bare_enqueue"]
    drain_ratio = best["fastq_drain"] / best["bare_drain"]
    print()
    print(f"{'':<10}{'bare jobs/s':>14}{'fastq jobs/s':>15}{'fastq/bare':>12}")
    for name, ratio in (("enqueue", enqueue_ratio), ("drain", drain_ratio)):
        print(
            f"{name:<10}{best['bare_' + name]:>14,.0f}{best['fastq_' + name]:>15,.0f}{ratio:>12.2f}"
        )
    print()
    print(
        f"latency, enqueue to start ({lat['jobs']:,} jobs at {lat['rate_actual']:,.0f} jobs/s,"
        f" one idle worker):"
    )
    print(
        f"  p50 {lat['p50_ms']:.2f} ms   p95 {lat['p95_ms']:.2f} ms   "
        f"p99 {lat['p99_ms']:.2f} ms   max {lat['max_ms']:.2f} ms"
    )
    print()
    print("targets (informational; the exit status does not depend on them):")
    print(
        f"  drain        >= {TARGET_DRAIN:.0%} of bare:          {drain_ratio:6.1%}  "
        f"{verdict(drain_ratio, TARGET_DRAIN)}"
    )
    print(
        f"  enqueue_many >= {TARGET_ENQUEUE:.0%} of bare enqueue:  {enqueue_ratio:6.1%}  "
        f"{verdict(enqueue_ratio, TARGET_ENQUEUE)}"
    )

    report: dict[str, Any] = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": n,
            "batch": batch,
            "repeat": args.repeat,
            "latency_jobs": args.latency_jobs,
            "rate": args.rate,
        },
        "runs": runs,
        "best_jobs_s": best,
        "ratios": {"enqueue": enqueue_ratio, "drain": drain_ratio},
        "targets": {
            "drain": {"min": TARGET_DRAIN, "pass": drain_ratio >= TARGET_DRAIN},
            "enqueue": {"min": TARGET_ENQUEUE, "pass": enqueue_ratio >= TARGET_ENQUEUE},
        },
        "latency": lat,
    }
    write_report(report, "e2e_worker", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
