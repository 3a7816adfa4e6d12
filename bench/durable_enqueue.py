"""What ``App(min_replicas=1)`` costs an enqueue: ``enqueue_many`` throughput and
single ``enqueue`` latency, with and without waiting for a replica, in one run.

One throwaway master and one replica of it (loopback, no persistence), so the wait
is replication's own latency, not a network's. The two modes alternate within each
repetition; the best throughput of each is kept, and the latencies are pooled.

    python -m bench.durable_enqueue [--jobs 100000] [--batch 10000] [--singles 2000]
                                    [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import redis

import fastq
from bench.harness import add_json_option, write_report
from fastq.errors import NotReplicated
from fastq.testing.redis_server import RedisServer

MODES = (0, 1)  # min_replicas


def start_pair() -> tuple[RedisServer, RedisServer]:
    master = RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(master.port)]).start()
    client = redis.Redis(port=replica.port)
    deadline = time.monotonic() + 30
    while client.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not sync")
        time.sleep(0.05)
    client.close()
    return master, replica


def warm_up(app: fastq.App) -> None:
    """One enqueue, confirmed by the replica when ``app`` asks for it, before any
    timing: on a loaded machine the first WAIT after the replica synced outlasted
    its second (NotReplicated, once in CI), and a replica that acknowledges one
    write is past its start-up."""
    deadline = time.monotonic() + 30
    while True:
        try:
            app.enqueue("noop", (0,))
            return
        except NotReplicated:
            if time.monotonic() > deadline:
                raise


def blast(app: fastq.App, jobs: int, batch: int) -> float:
    """Seconds to enqueue ``jobs`` no-op jobs, ``batch`` per ``enqueue_many``."""
    calls = [(i,) for i in range(batch)]
    t0 = time.perf_counter()
    for _ in range(jobs // batch):
        app.enqueue_many("noop", calls)
    return time.perf_counter() - t0


def singles(app: fastq.App, n: int) -> list[float]:
    """Milliseconds of each of ``n`` single ``enqueue`` calls."""
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        app.enqueue("noop", (i,))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def measure(url: str, jobs: int, batch: int, n_singles: int, repeat: int) -> dict[str, Any]:
    flusher = redis.Redis.from_url(url)
    apps = {m: fastq.App(url, namespace=f"durable{m}", min_replicas=m) for m in MODES}
    best = dict.fromkeys(MODES, float("inf"))
    latencies: dict[int, list[float]] = {m: [] for m in MODES}
    for app in apps.values():  # connect and load the scripts outside the timings
        warm_up(app)
    for _ in range(repeat):
        for m, app in apps.items():
            flusher.flushall()  # replicated too: both servers start each run empty
            best[m] = min(best[m], blast(app, jobs, batch))
            latencies[m] += singles(app, n_singles)
    for app in apps.values():
        app.close()
    flusher.close()
    out: dict[str, Any] = {"jobs": jobs, "batch": batch, "singles": n_singles, "repeat": repeat}
    for m in MODES:
        lat = latencies[m]
        out[f"min_replicas={m}"] = {
            "enqueue_many_jobs_per_s": jobs / best[m],
            "enqueue_p50_ms": pct(lat, 50),
            "enqueue_p99_ms": pct(lat, 99),
        }
    plain, durable = out["min_replicas=0"], out["min_replicas=1"]
    out["ratios"] = {
        "throughput": durable["enqueue_many_jobs_per_s"] / plain["enqueue_many_jobs_per_s"],
        "p50": durable["enqueue_p50_ms"] / plain["enqueue_p50_ms"],
        "p99": durable["enqueue_p99_ms"] / plain["enqueue_p99_ms"],
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per blast")
    parser.add_argument("--batch", type=int, default=10_000, help="calls per enqueue_many")
    parser.add_argument("--singles", type=int, default=2_000, help="single enqueues per run")
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    if args.jobs % args.batch:
        parser.error("--jobs must be a multiple of --batch")
    master, replica = start_pair()
    try:
        figures = measure(master.url, args.jobs, args.batch, args.singles, args.repeat)
    finally:
        replica.cleanup()
        master.cleanup()
    print(f"fastq.ACCELERATED={fastq.ACCELERATED}; a master and one replica on loopback")
    for m in MODES:
        f = figures[f"min_replicas={m}"]
        print(
            f"min_replicas={m}: enqueue_many {f['enqueue_many_jobs_per_s']:9,.0f} jobs/s "
            f"({args.jobs:,} jobs, {args.batch:,} a call, best of {args.repeat}); enqueue "
            f"p50 {f['enqueue_p50_ms']:.3f} ms, p99 {f['enqueue_p99_ms']:.3f} ms "
            f"({args.singles * args.repeat:,} calls)"
        )
    r = figures["ratios"]
    print(
        f"min_replicas=1 / min_replicas=0: throughput {r['throughput']:.2f}x, "
        f"latency p50 {r['p50']:.2f}x, p99 {r['p99']:.2f}x"
    )
    write_report(figures, "durable_enqueue", args.json)


if __name__ == "__main__":
    main()
