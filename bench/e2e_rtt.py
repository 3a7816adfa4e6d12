"""A Redis a round trip away: ``fastq pool -c 2`` draining N no-op jobs through
``bench.rtt_proxy`` holding each chunk 0, 0.5 and 2.5 ms each way (round trips
of 0, 1 and 5 ms added), against the same drain straight to Redis.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379); each proxy is a process of its own. The drains are
the harness's ``pool_drain`` (e2e_pool's): by default warm, a pool already up and
idle when the N jobs appear at once, so that start-up through a slow link is not in
the figure (``--cold``: queued beforehand, timed from ``Popen``). The pool, its
producer (the enqueue) and the bench's polling of the count all go through the
proxy; the blast that publishes the staged jobs and the Redis CPU probe go straight
to Redis.

The ratios are what to read: each RTT's rate over the 0-ms proxy's, measured in the
same run, interleaved (``--repeat`` rounds, the median of each).

    python -m bench.e2e_rtt                 # 100,000 jobs, median of 3
    python -m bench.e2e_rtt --quick         # 5,000 jobs, once
    python -m bench.e2e_rtt --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Optional

import redis

from bench.harness import (
    BenchFailure,
    Proxy,
    add_json_option,
    add_progress_option,
    announce,
    configure_progress,
    pool_drain,
    write_report,
)
from bench.jobs import pool as pool_jobs
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer

# name -> hold each way in ms (None: no proxy)
LINKS: dict[str, Optional[float]] = {"direct": None, "proxy0": 0.0, "rtt1": 0.5, "rtt5": 2.5}
TARGET_RTT1 = 0.80  # 1 ms RTT keeps >= 80% of the 0-ms proxy's rate
CONCURRENCY = 2


def drain_via(
    client: redis.Redis, server: RedisServer, link: str, n: int, batch: int, warm: bool
) -> dict[str, Any]:
    delay_ms = LINKS[link]
    proxy = None if delay_ms is None else Proxy(server.port, delay_ms)
    try:
        url = server.url if proxy is None else proxy.url()
        r = pool_drain(client, url, link, pool_jobs.noop, n, CONCURRENCY, batch, warm=warm)
    finally:
        holds = proxy.stop() if proxy is not None else {}
    r["link"] = link
    r["proxy_hold"] = holds
    return r


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the median")
    parser.add_argument("--cold", action="store_true", help="time from Popen, jobs queued first")
    parser.add_argument("--only", help=f"comma-separated links ({','.join(LINKS)})")
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, once")
    add_json_option(parser)
    add_progress_option(parser)
    args = parser.parse_args(argv)
    configure_progress(args.progress)
    if args.quick:
        args.jobs = min(args.jobs, 5_000)
        args.repeat = 1
    args.links = list(LINKS) if not args.only else [k for k in LINKS if k in args.only.split(",")]
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, batch, warm = args.jobs, args.batch, not args.cold
    server = RedisServer().start()
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq RTT benchmark",
            f"pool -c {CONCURRENCY}, {n:,} no-op jobs, batch {batch}, "
            f"{'warm (pool up and idle, then the blast)' if warm else 'cold (from Popen)'}; "
            f"throwaway redis-server at {server.url}",
        )
        scripts.load_all(client)
        runs: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(args.repeat):  # interleaved, so drift hits every link alike
            for link in args.links:
                r = drain_via(client, server, link, n, batch, warm)
                runs.setdefault(link, []).append(r)
                hold = r["proxy_hold"]
                held = (
                    f"; proxy held {hold['chunks']:,} chunks, mean {hold['mean_ms']:.3f} ms,"
                    f" p99 {hold['p99_ms']:.3f} ms"
                    if hold.get("chunks")
                    else ""
                )
                print(
                    f"  {link:<7} (run {round_ + 1}): {r['jobs_s']:,.0f} jobs/s, first→last "
                    f"{r['steady_jobs_s'] or 0:,.0f}; Redis "
                    f"{r['redis_cpu_us_per_job']:.2f} µs/job, "
                    f"{r['evalsha_per_100_jobs']:.2f} EVALSHA/100 jobs{held}"
                )
        for link, these in runs.items():
            results[link] = sorted(these, key=lambda r: r["jobs_s"])[len(these) // 2]
            results[link]["runs_jobs_s"] = [r["jobs_s"] for r in these]
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        pool_jobs.app.close()
        server.cleanup()
    run_s = time.perf_counter() - started

    base = results.get("proxy0")
    # each round's link over the same round's 0-ms proxy (the runs next to each
    # other in time share the box's load), the median over the rounds
    paired: dict[str, Optional[float]] = {}
    for link, these in runs.items():
        if "proxy0" in runs:
            per_round = sorted(r["jobs_s"] / b["jobs_s"] for r, b in zip(these, runs["proxy0"]))
            paired[link] = per_round[len(per_round) // 2]
    print()
    print(
        f"{'link':<34}{'jobs/s':>10}{'first→last/s':>14}  ratio to the 0-ms proxy"
        f" (median of the rounds' ratios)"
    )
    labels = {
        "direct": "straight to Redis",
        "proxy0": "proxy, 0 ms held",
        "rtt1": "proxy, 0.5 ms each way (1 ms RTT)",
        "rtt5": "proxy, 2.5 ms each way (5 ms RTT)",
    }
    ratios: dict[str, Optional[float]] = {}
    for link, r in results.items():
        ratio = r["jobs_s"] / base["jobs_s"] if base else None
        ratios[link] = ratio
        shown = f"{ratio:.2f}" if ratio is not None else "—"
        if paired.get(link) is not None:
            shown += f" ({paired[link]:.2f})"
        print(f"{labels[link]:<34}{r['jobs_s']:>10,.0f}{r['steady_jobs_s'] or 0:>14,.0f}  {shown}")
    targets: dict[str, Any] = {}
    print()
    print("targets (informational; the exit status does not depend on them):")
    if ratios.get("rtt1") is not None:
        value = ratios["rtt1"]
        assert value is not None
        ok = value >= TARGET_RTT1
        verdict = "PASS" if ok else "BELOW"
        print(f"  1 ms RTT >= {TARGET_RTT1:.0%} of the 0-ms proxy  {value:>7.1%}  {verdict}")
        targets["rtt1_vs_proxy0"] = {"value": value, "pass": ok}
    if ratios.get("rtt5") is not None:
        print(f"  5 ms RTT / 0-ms proxy (reported)        {ratios['rtt5']:>7.1%}")
        targets["rtt5_vs_proxy0"] = {"value": ratios["rtt5"], "pass": None}
    if base and "direct" in results:
        cost = base["jobs_s"] / results["direct"]["jobs_s"]
        print(f"  0-ms proxy / straight to Redis (reported) {cost:>5.1%}")
        targets["proxy0_vs_direct"] = {"value": cost, "pass": None}
    print(f"\n(run took {run_s:.1f} s)")
    report = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": n,
            "batch": batch,
            "repeat": args.repeat,
            "warm": warm,
            "links": args.links,
            "quick": args.quick,
        },
        "scenarios": results,
        "ratios": ratios,
        "paired_ratios": paired,
        "targets": targets,
        "run_s": run_s,
    }
    write_report(report, "e2e_rtt", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
