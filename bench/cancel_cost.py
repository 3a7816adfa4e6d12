"""How long cancelling a big tagged blast holds Redis, and what tags and unique
locks add to an enqueue: script calls, each one's server time and the longest.

Server time from ``INFO commandstats`` and the slow log (every call logged), on a
throwaway redis-server, so the client's speed drops out.

    python -m bench.cancel_cost [--ready 20000] [--scheduled 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import redis

import fastq
from bench.harness import add_json_option, write_report
from fastq.testing.redis_server import RedisServer


def server_time(r: redis.Redis, fn: Callable[[], Any]) -> dict[str, float]:
    """Run ``fn``; its EVALSHA calls: how many, µs a call, the longest, and wall ms."""
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 10_000)
    r.slowlog_reset()
    r.config_resetstat()
    t0 = time.perf_counter()
    result = fn()
    wall_s = time.perf_counter() - t0
    stats = r.info("commandstats")["cmdstat_evalsha"]
    calls = [e for e in r.slowlog_get(10_000) if b"EVALSHA" in bytes(e["command"]).upper()]
    return {
        "result": result if isinstance(result, int) else len(result),
        "calls": stats["calls"],
        "us_per_call": stats["usec_per_call"],
        "longest_call_us": max(e["duration"] for e in calls),
        "wall_ms": wall_s * 1000,
    }


def measure(url: str, ready: int, scheduled: int) -> dict[str, dict[str, float]]:
    app = fastq.App(url, namespace=f"cancel{time.monotonic_ns()}")

    @app.job(queue="mailer")
    def send(i: int) -> None:
        pass

    r = app.redis
    calls = [(i,) for i in range(ready)]
    out = {
        "enqueue_plain": server_time(r, lambda: send.enqueue_many(calls)),
        "enqueue_2_tags": server_time(
            r, lambda: send.enqueue_many(calls, tags=["campaign:42", "mail"])
        ),
        "enqueue_unique": server_time(r, lambda: send.enqueue_many(calls, unique_for_s=3600)),
    }
    app.purge("mailer")
    send.enqueue_many(calls, tags=["campaign:42", "mail"])
    send.enqueue_many([(i,) for i in range(scheduled)], tags=["campaign:42"], delay_s=3600)
    out["cancel_by_tag"] = server_time(r, lambda: app.cancel_by_tag("campaign:42"))
    app.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready", type=int, default=20_000)
    parser.add_argument("--scheduled", type=int, default=10_000)
    add_json_option(parser)
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        figures = measure(server.url, args.ready, args.scheduled)
    finally:
        server.cleanup()
    print(f"fastq.ACCELERATED={fastq.ACCELERATED}")
    for name, f in figures.items():
        per_job = f["us_per_call"] * f["calls"] / max(f["result"], 1)
        print(
            f"{name:15s} {f['result']:6.0f} jobs in {f['calls']:3.0f} calls: "
            f"{f['us_per_call']:7.0f} µs a call ({per_job:.2f} µs a job), longest "
            f"{f['longest_call_us']} µs; {f['wall_ms']:.0f} ms wall"
        )
    write_report(figures, "cancel_cost", args.json)


if __name__ == "__main__":
    main()
