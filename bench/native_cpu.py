"""CPU per job with the native extension and without it (``FASTQ_NO_EXTENSIONS=1``).

Two figures, each the user+system CPU of one process divided by its jobs, measured
in subprocesses that alternate the two modes within one run (native, pure, native,
pure, ...), against one throwaway ``redis-server`` this script starts itself:

1. worker    one ``Worker`` in burst mode drains ``--jobs`` queued no-op jobs;
             its CPU from just before ``run()`` to its return (lease and heartbeat
             threads included)
2. producer  ``enqueue_many`` of ``--produce`` mailing-shaped jobs
             (``send_email("user123@example.com", "Your weekly digest", 42)``)

The medians of ``--repeat`` runs are printed in µs/job for each mode, and the ratio
pure / native (the target: >= 1.5 for both). The queued jobs are enqueued by this
process (native) before each worker run, outside what is measured.

    python -m bench.native_cpu --repeat 3     # 200,000 jobs drained, 30,000 enqueued
    python -m bench.native_cpu --quick        # CI smoke: 2,000 and 1,000, once
    python -m bench.native_cpu --json out.json
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson

import fastq
from bench.harness import ROOT, BenchFailure, add_json_option, write_report
from fastq.testing.redis_server import RedisServer

QUEUE = "cpu"
MODES = ("native", "pure")
MAILING_CALL = ("user123@example.com", "Your weekly digest", 42)


def make_app(url: str, namespace: str) -> tuple[fastq.App, Any, Any]:
    app = fastq.App(url, namespace=namespace)
    noop = app.job(queue=QUEUE, name="noop")(_noop)
    mail = app.job(queue=QUEUE, name="send_email")(_send_email)
    return app, noop, mail


def _noop(i: int) -> None:
    """The no-op job of the drain."""


def _send_email(to: str, subject: str, user_id: int) -> None:
    """The mailing-shaped job of the producer figure (never run here)."""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the children (one process per measure, in the mode its environment says) ---------


def child_worker(url: str, namespace: str, jobs: int) -> dict[str, Any]:
    from fastq.worker.worker import Worker

    app, _, _ = make_app(url, namespace)
    worker = Worker(app, [QUEUE], burst=True)
    app.redis.ping()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    worker.run()
    cpu, wall = _cpu_s() - cpu0, time.perf_counter() - t0
    stats = app.stats(QUEUE)
    if (stats["processed"], stats["ready"], stats["inflight"]) != (jobs, 0, 0):
        raise BenchFailure(f"worker: expected processed={jobs}, ready=0, inflight=0: {stats}")
    return {"cpu_s": cpu, "wall_s": wall, "jobs": jobs}


def child_producer(url: str, namespace: str, jobs: int) -> dict[str, Any]:
    app, _, mail = make_app(url, namespace)
    calls = [MAILING_CALL] * jobs
    app.redis.ping()
    mail.enqueue_many(calls[:100])  # scripts loaded, code paths warm
    cpu0, t0 = _cpu_s(), time.perf_counter()
    ids = mail.enqueue_many(calls)
    cpu, wall = _cpu_s() - cpu0, time.perf_counter() - t0
    if len(set(ids)) != jobs or app.stats(QUEUE)["ready"] != jobs + 100:
        raise BenchFailure(f"producer: expected {jobs + 100} ready jobs: {app.stats(QUEUE)}")
    return {"cpu_s": cpu, "wall_s": wall, "jobs": jobs}


# -- the parent -------------------------------------------------------------------------


def run_child(role: str, mode: str, url: str, namespace: str, jobs: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("FASTQ_NO_EXTENSIONS", None)
    if mode == "pure":
        env["FASTQ_NO_EXTENSIONS"] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.native_cpu",
            "--child",
            role,
            "--url",
            url,
            "--namespace",
            namespace,
            "--jobs",
            str(jobs),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise BenchFailure(f"{role} ({mode}) failed:\n{proc.stdout}\n{proc.stderr}")
    report: dict[str, Any] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    if report["accelerated"] != (mode == "native"):
        raise BenchFailure(f"{role} ({mode}) ran with fastq.ACCELERATED={report['accelerated']}")
    return report


def measure(url: str, repeat: int, drain_jobs: int, produce_jobs: int) -> dict[str, Any]:
    us: dict[str, dict[str, list[float]]] = {
        role: {mode: [] for mode in MODES} for role in ("worker", "producer")
    }
    for r in range(repeat):
        for mode in MODES:
            namespace = f"w{r}{mode}"
            app, noop, _ = make_app(url, namespace)
            noop.enqueue_many([(i,) for i in range(drain_jobs)])
            report = run_child("worker", mode, url, namespace, drain_jobs)
            us["worker"][mode].append(report["cpu_s"] / drain_jobs * 1e6)
            app.redis.flushdb()  # only this script's own server
            report = run_child("producer", mode, url, f"p{r}{mode}", produce_jobs)
            us["producer"][mode].append(report["cpu_s"] / produce_jobs * 1e6)
            app.redis.flushdb()
            print(
                f"  run {r + 1} {mode:6}  worker {us['worker'][mode][-1]:6.2f} µs/job   "
                f"producer {us['producer'][mode][-1]:6.2f} µs/job",
                flush=True,
            )
    result: dict[str, Any] = {"us_per_job": us, "median_us": {}, "ratio": {}}
    for role in ("worker", "producer"):
        med = {mode: statistics.median(us[role][mode]) for mode in MODES}
        result["median_us"][role] = med
        result["ratio"][role] = med["pure"] / med["native"] if med["native"] > 0 else 0.0
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=200_000, help="no-op jobs drained")
    parser.add_argument("--produce", type=int, default=30_000, help="jobs enqueued")
    parser.add_argument("--quick", action="store_true", help="CI smoke: tiny, once")
    add_json_option(parser)
    parser.add_argument("--child", choices=("worker", "producer"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        body = child_worker if args.child == "worker" else child_producer
        report = body(args.url, args.namespace, args.jobs)
        report["accelerated"] = fastq.ACCELERATED
        print(orjson.dumps(report).decode())
        return 0

    if args.quick:
        args.repeat, args.jobs, args.produce = 1, 2_000, 1_000
    print(
        f"native_cpu: python {platform.python_version()}, {os.cpu_count()} cpus; "
        f"worker drains {args.jobs:,} no-op jobs, producer enqueues {args.produce:,}; "
        f"median of {args.repeat}",
        flush=True,
    )
    with RedisServer() as server:
        result = measure(server.url, args.repeat, args.jobs, args.produce)
    for role in ("worker", "producer"):
        med = result["median_us"][role]
        print(
            f"{role:8}  native {med['native']:6.2f} µs/job  pure {med['pure']:6.2f} µs/job  "
            f"ratio pure/native {result['ratio'][role]:.2f} (target >= 1.5)"
        )
    result["config"] = {"repeat": args.repeat, "jobs": args.jobs, "produce": args.produce}
    write_report(result, "native_cpu", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
