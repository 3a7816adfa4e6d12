"""A global rate limit across pools: N jobs at R/s through P pools of ``-c C`` on one
queue take N / R seconds.

One throwaway redis-server; P ``fastq pool`` processes (each with its reaper) serve
the queue ``limited`` of ``bench.jobs.rate``. Per case: the pools are up and idle,
``app.set_rate_limit`` (a fresh, full bucket of the default burst), then the N jobs
are enqueued at once. The elapsed time runs from just before the enqueue to the
moment the queue's ``processed`` count reaches N (polled every 2 ms): what a user
waits for a blast to go out. The target is N / R; a bucket full at the start lets
``burst`` jobs go at once, so the ideal is (N - burst) / R plus one job's latency.

Also reported, from the jobs' own starts on Redis' clock: the most starts in any
window of one period (the limit allows rate + burst - 1 claims there; the starts of
a claim come after it, by up to the jobs a worker holds), and claims per job (script
calls on Redis per job: each throttled worker sleeps until the next token, so a few).

With ``--shards K`` the queue is sharded: the limit is the whole queue's, each shard
taking a K-th of it, and a blast is spread evenly over the shards.

    python -m bench.rate_limit                      # 3,000 and 600 jobs at 100/s, 3 pools of -c 4
    python -m bench.rate_limit --shards 4           # the same on a queue of 4 shards
    python -m bench.rate_limit --cases 40 --rate 20 --pools 1 -c 2   # the CI smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Optional

import fastq
from bench.harness import BenchFailure, Pool, add_json_option, write_report
from bench.jobs import rate as rate_jobs
from fastq.testing.redis_server import RedisServer

APP_SPEC = "bench.jobs.rate"
QUEUE = "limited"


def max_in_window(starts_us: list[int], window_us: float) -> int:
    """The most starts in any half-open window [t, t + window_us)."""
    best, lo = 0, 0
    for hi, at in enumerate(starts_us):
        while at - starts_us[lo] >= window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def run_case(app: fastq.App, jobs: int, rate: int, per_s: float, shards: int) -> dict[str, Any]:
    r = app.redis
    starts_key = f"{app.namespace}:starts"
    r.delete(starts_key)
    app.set_rate_limit(QUEUE, rate, per_s=per_s)
    limit = app.rate_limit(QUEUE)
    assert limit is not None
    done_before = app.stats(QUEUE)["processed"]
    time.sleep(0.5)  # the wake-up of the new limit is spent, the workers are idle again
    claims_before = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    t0 = time.perf_counter()
    rate_jobs.send.enqueue_many([(i,) for i in range(jobs)])
    while app.stats(QUEUE)["processed"] - done_before < jobs:
        time.sleep(0.002)
    elapsed_s = time.perf_counter() - t0
    calls = r.info("commandstats")["cmdstat_evalsha"]["calls"] - claims_before
    starts = sorted(int(s) for s in r.lrange(starts_key, 0, -1))
    target_s = jobs / rate * per_s
    return {
        "jobs": jobs,
        "rate": rate,
        "per_s": per_s,
        "burst": limit.burst,
        "elapsed_s": elapsed_s,
        "target_s": target_s,
        "error": elapsed_s / target_s - 1,
        "ideal_s": (jobs - limit.burst) / rate * per_s,
        "start_span_s": (starts[-1] - starts[0]) / 1e6 if starts else 0.0,
        "max_starts_per_period": max_in_window(starts, per_s * 1e6),
        # a sharded queue's shards may each let ceil(burst / shards) go at once
        "allowed_per_period": rate + shards * -(-limit.burst // shards) - 1,
        "shards": shards,
        "script_calls_per_job": calls / jobs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="3000,600", help="job counts, comma-separated")
    parser.add_argument("--rate", type=int, default=100, help="jobs per period")
    parser.add_argument("--per", type=float, default=1.0, help="the period, in seconds")
    parser.add_argument("--pools", type=int, default=3)
    parser.add_argument("-c", "--concurrency", type=int, default=4, help="children per pool")
    parser.add_argument("--shards", type=int, default=1, help="shards of the queue")
    add_json_option(parser)
    args = parser.parse_args()
    cases = [int(n) for n in args.cases.split(",")]
    server = RedisServer().start()
    pools: list[Pool] = []
    results: list[dict[str, Any]] = []
    app: Optional[fastq.App] = None
    try:
        app = rate_jobs.app
        app.configure(redis_url=server.url, namespace=f"rate{os.getpid()}")
        app.redis.sadd(f"{app.namespace}:queues", QUEUE)  # a known queue before any job
        if args.shards > 1:  # recorded in Redis, where the pools read it
            app.declare_queue(QUEUE, shards=args.shards)
            assert app.shards(QUEUE) == args.shards
        for _ in range(args.pools):
            pools.append(Pool(server.url, app.namespace, QUEUE, args.concurrency, app=APP_SPEC))
            pools[-1].start()
        for pool in pools:
            pool.workers(timeout_s=60)
        for jobs in cases:
            results.append(run_case(app, jobs, args.rate, args.per, args.shards))
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for pool in pools:
            pool.cleanup()
        if app is not None:
            app.close()
        server.cleanup()
    print(
        f"fastq.ACCELERATED={fastq.ACCELERATED}; {args.pools} pools of -c {args.concurrency} "
        f"on one queue of {args.shards} shard(s), one redis-server"
    )
    print(
        f"{'jobs':>6} {'limit':>14} {'elapsed s':>10} {'target s':>9} {'error':>7} "
        f"{'ideal s':>8} {'max/period':>11} {'calls/job':>10}"
    )
    for f in results:
        limit = f"{f['rate']}/{f['per_s']:g}s b{f['burst']}"
        print(
            f"{f['jobs']:>6} {limit:>14} {f['elapsed_s']:>10.3f} {f['target_s']:>9.3f} "
            f"{f['error']:>+7.2%} {f['ideal_s']:>8.3f} "
            f"{f['max_starts_per_period']:>5}/{f['allowed_per_period']:<5} "
            f"{f['script_calls_per_job']:>10.1f}"
        )
    write_report({"cases": results}, "rate_limit", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
