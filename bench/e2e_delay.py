"""Delayed-jobs benchmark: how late an idle ``fastq pool -c 2`` starts scheduled jobs,
and how long a campaign of jobs falling due at once blocks Redis.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379); the pool is a real subprocess,
``python -m fastq pool -c 2 --app bench.jobs.delay``, stopped with SIGTERM (it
must exit 0):

1. spread    N jobs due evenly over S seconds, enqueued with ``enqueue_at`` in a
             shuffled order shortly before the first is due, to a pool that is up
             and idle: lateness = start - the ``at`` given (the job's first act is
             to read the clock; the same host's clock as Redis'): p50, p99, max,
             and how many started early (must be none). Also against the due time
             as Redis keeps it (``at`` rounded up to its millisecond), which leaves
             out the rounding
2. campaign  M jobs with ``enqueue_many(at=...)``, all due in the same
             millisecond, three priorities, drained by the same idle pool: the
             longest single script call while they fall due and drain (SLOWLOG,
             every command logged), and the drain rate from the due time

Targets (informational; the exit status depends only on every job having run
exactly once): spread lateness p99 < 10 ms, p50 < 2 ms, none early; campaign
longest script call < 5 ms.

    python -m bench.e2e_delay                 # 2,000 jobs over 4 s; a 30,000-job campaign
    python -m bench.e2e_delay --quick         # 400 jobs over 2 s; a 5,000-job campaign
    python -m bench.e2e_delay --json out.json
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from typing import Any, Optional

import redis

from bench.harness import (
    BenchFailure,
    Pool,
    add_json_option,
    announce,
    write_report,
)
from bench.jobs import delay as delay_jobs
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer

APP_SPEC = "bench.jobs.delay"
QUEUE = "delayed"
WARM_SETTLE_S = 1.5  # the pool's children connected and idle before anything is scheduled
# the first job of the spread is due this long after scheduling starts, so that
# each is scheduled before it is due (one enqueue_at a job, each a round trip)
LEAD_S = 1.0
LEAD_PER_JOB_S = 0.002
TARGET_P99_MS = 10.0
TARGET_P50_MS = 2.0
TARGET_LONGEST_CALL_US = 5_000
CAMPAIGN_PRIORITIES = (0, 5, -2)


def collect(
    client: redis.Redis, namespace: str, n: int, timeout_s: float, pool: Pool
) -> dict[int, float]:
    """Wait until ``n`` jobs recorded their start; return job -> start (Unix s)."""
    key = f"{namespace}:started"
    deadline = time.monotonic() + timeout_s
    while client.llen(key) < n:
        pool.check_alive("drain")
        if time.monotonic() > deadline:
            raise BenchFailure(
                f"only {client.llen(key)} of {n} jobs started within {timeout_s:.0f} s"
            )
        time.sleep(0.05)
    time.sleep(0.2)  # a job run twice would show now
    starts: dict[int, float] = {}
    for raw in client.lrange(key, 0, -1):
        i, started = raw.split()
        if int(i) in starts:
            raise BenchFailure(f"job {int(i)} ran twice")
        starts[int(i)] = float(started)
    if len(starts) != n:
        raise BenchFailure(f"{len(starts)} jobs started, expected {n}")
    return starts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(client: redis.Redis, url: str, n: int, span_s: float) -> dict[str, Any]:
    """N jobs due evenly over span_s, scheduled in a shuffled order, to an idle pool."""
    namespace = "spread"
    app = delay_jobs.app
    app.configure(redis_url=url, namespace=namespace)
    pool = Pool(url, namespace, QUEUE, 2, app=APP_SPEC).start()
    try:
        time.sleep(WARM_SETTLE_S)
        pool.check_alive("pool start")
        first = time.time() + LEAD_S + n * LEAD_PER_JOB_S
        due = {i: first + i * span_s / n for i in range(n)}
        order = list(due)
        random.Random(10).shuffle(order)
        # a job whose enqueue returned after its due time measures the enqueue, not
        # the scheduler (a loaded box): counted, and left out of the lateness
        scheduled_late: set[int] = set()
        t0 = time.perf_counter()
        for i in order:
            delay_jobs.stamp.enqueue_at(due[i], i)
            if time.time() > due[i]:
                scheduled_late.add(i)
        enqueue_s = time.perf_counter() - t0
        if len(scheduled_late) == n:
            raise BenchFailure(f"scheduling {n} jobs took {enqueue_s:.2f} s, past every due time")
        starts = collect(client, namespace, n, span_s + 30, pool)
        pool.stop("spread")
    finally:
        pool.cleanup()
    early = sum(1 for i in range(n) if starts[i] < due[i])
    in_time = [i for i in range(n) if i not in scheduled_late]
    late_ms = [(starts[i] - due[i]) * 1000 for i in in_time]
    # the due time as Redis keeps it: at, rounded up to its millisecond
    late_due_ms = [(starts[i] - math.ceil(due[i] * 1000) / 1000) * 1000 for i in in_time]
    return {
        "jobs": n,
        "span_s": span_s,
        "schedule_s": enqueue_s,
        "lateness_ms": {
            "min": min(late_ms),
            "p50": statistics.median(late_ms),
            "p90": percentile(late_ms, 0.90),
            "p99": percentile(late_ms, 0.99),
            "max": max(late_ms),
        },
        "lateness_vs_due_ms_ms": {
            "p50": statistics.median(late_due_ms),
            "p99": percentile(late_due_ms, 0.99),
            "max": max(late_due_ms),
        },
        "early": early,
        "scheduled_late": len(scheduled_late),
    }


def campaign(client: redis.Redis, url: str, n: int) -> dict[str, Any]:
    """N jobs all due in the same millisecond, three priorities, to an idle pool."""
    namespace = "campaign"
    app = delay_jobs.app
    app.configure(redis_url=url, namespace=namespace)
    pool = Pool(url, namespace, QUEUE, 2, app=APP_SPEC).start()
    try:
        time.sleep(WARM_SETTLE_S)
        pool.check_alive("pool start")
        at = time.time() + max(1.0, n / 5_000)  # every chunk in before they fall due
        chunk = 1000
        t0 = time.perf_counter()
        for c, lo in enumerate(range(0, n, chunk)):
            calls = [(i,) for i in range(lo, min(n, lo + chunk))]
            priority = CAMPAIGN_PRIORITIES[c % len(CAMPAIGN_PRIORITIES)]
            delay_jobs.stamp.enqueue_many(calls, at=at, priority=priority)
        enqueue_s = time.perf_counter() - t0
        if time.time() > at:
            raise BenchFailure(f"scheduling {n} jobs took {enqueue_s:.2f} s, past their due time")
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        starts = collect(client, namespace, n, 120, pool)
        client.config_set("slowlog-log-slower-than", 10_000)
        entries = client.slowlog_get(1_000_000)
        pool.stop("campaign")
    finally:
        pool.cleanup()
    calls = [e for e in entries if e["command"].split()[0].upper() in (b"EVALSHA", b"EVAL")]
    by_sha = {s.sha.encode(): s.name for s in scripts.loaded()}
    longest = max(calls, key=lambda e: e["duration"])
    per_script: dict[str, int] = {}
    for e in calls:
        name = by_sha.get(e["command"].split()[1], "?")
        per_script[name] = max(per_script.get(name, 0), e["duration"])
    last_s = max(starts.values()) - at
    return {
        "jobs": n,
        "schedule_s": enqueue_s,
        "script_calls": len(calls),
        "longest_call_us": longest["duration"],
        "longest_call_script": by_sha.get(longest["command"].split()[1], "?"),
        "longest_call_us_by_script": per_script,
        "p99_call_us": percentile([e["duration"] for e in calls], 0.99),
        "calls_over_target": sum(1 for e in calls if e["duration"] >= TARGET_LONGEST_CALL_US),
        "first_start_ms": (min(starts.values()) - at) * 1000,
        "last_start_s": last_s,
        "jobs_s_from_due": n / last_s if last_s > 0 else None,
    }


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, help="jobs of the spread (default 2000)")
    p.add_argument("--span", type=float, help="seconds the spread's due times cover (default 4)")
    p.add_argument("--campaign-jobs", type=int, help="jobs due at once (default 30000)")
    p.add_argument("--quick", action="store_true", help="400 jobs over 2 s; a 5,000-job campaign")
    add_json_option(p)
    args = p.parse_args(argv)
    if args.jobs is None:
        args.jobs = 400 if args.quick else 2000
    if args.span is None:
        args.span = 2.0 if args.quick else 4.0
    if args.campaign_jobs is None:
        args.campaign_jobs = 5000 if args.quick else 30_000
    if min(args.jobs, args.campaign_jobs) < 1 or not args.span > 0:
        p.error("job counts and --span must be positive")
    return args


def _target(value: float, target: float, below: bool = True) -> dict[str, Any]:
    return {"value": value, "target": target, "pass": value < target if below else value >= target}


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq delayed-jobs benchmark",
            f"{args.jobs:,} jobs due over {args.span:g} s, a campaign of "
            f"{args.campaign_jobs:,}, pool -c 2; throwaway redis-server at {server.url}",
        )
        scripts.load_all(client)
        results = {
            "spread": spread(client, server.url, args.jobs, args.span),
            "campaign": campaign(client, server.url, args.campaign_jobs),
        }
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        server.cleanup()
    s, c = results["spread"], results["campaign"]
    late = s["lateness_ms"]
    targets = {
        "lateness_p99_ms": _target(late["p99"], TARGET_P99_MS),
        "lateness_p50_ms": _target(late["p50"], TARGET_P50_MS),
        "early": {"value": s["early"], "target": 0, "pass": s["early"] == 0},
        "campaign_longest_call_us": _target(c["longest_call_us"], TARGET_LONGEST_CALL_US),
    }

    def verdict(name: str) -> str:
        return "ok" if targets[name]["pass"] else "MISSED"

    print(
        f"spread: {s['jobs']:,} jobs due over {s['span_s']:g} s to an idle pool -c 2 "
        f"(scheduled in {s['schedule_s']:.2f} s; {s['scheduled_late']} scheduled after "
        "their due time, left out): lateness p50 {late['p50']:.2f} ms "
        f"[target < {TARGET_P50_MS:g}: {verdict('lateness_p50_ms')}], p90 {late['p90']:.2f}, "
        f"p99 {late['p99']:.2f} [target < {TARGET_P99_MS:g}: {verdict('lateness_p99_ms')}], "
        f"max {late['max']:.2f}, min {late['min']:.2f}; early {s['early']} "
        f"[{verdict('early')}]; against the due millisecond: p50 "
        f"{s['lateness_vs_due_ms_ms']['p50']:.2f} ms, p99 {s['lateness_vs_due_ms_ms']['p99']:.2f}"
    )
    print(
        f"campaign: {c['jobs']:,} jobs due in the same millisecond, priorities "
        f"{CAMPAIGN_PRIORITIES}: longest script call {c['longest_call_us']:,} us "
        f"({c['longest_call_script']}) [target < {TARGET_LONGEST_CALL_US:,}: "
        f"{verdict('campaign_longest_call_us')}] of {c['script_calls']:,} (p99 "
        f"{c['p99_call_us']:,} us, {c['calls_over_target']} over the target); by script "
        f"{c['longest_call_us_by_script']}; first start {c['first_start_ms']:.1f} ms after "
        f"the due time, last {c['last_start_s']:.2f} s ({c['jobs_s_from_due']:,.0f} jobs/s)"
    )
    report = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": args.jobs,
            "span_s": args.span,
            "campaign_jobs": args.campaign_jobs,
            "quick": args.quick,
        },
        "scenarios": results,
        "targets": targets,
    }
    write_report(report, "e2e_delay", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
