"""How long a purge of a big queue holds Redis: its script calls, each one's server
time and the longest, and the wall time of ``App.purge``.

Server time from ``INFO commandstats`` and the slow log (every call logged), on a
throwaway redis-server, so the client's speed drops out.

    python -m bench.purge_cost [--ready 20000] [--scheduled 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import time

import fastq
from bench.harness import add_json_option, write_report
from fastq.testing.redis_server import RedisServer


def measure(url: str, ready: int, scheduled: int) -> dict[str, float]:
    """Enqueue ``ready`` + ``scheduled`` jobs on a fresh namespace and purge them."""
    app = fastq.App(url, namespace=f"purge{time.monotonic_ns()}")

    @app.job(queue="mailer")
    def send(i: int) -> None:
        pass

    send.enqueue_many([(i,) for i in range(ready)])
    send.enqueue_many([(i,) for i in range(scheduled)], delay_s=3600)
    r = app.redis
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 10_000)
    r.slowlog_reset()
    r.config_resetstat()
    t0 = time.perf_counter()
    purged = app.purge("mailer")
    wall_s = time.perf_counter() - t0
    stats = r.info("commandstats")["cmdstat_evalsha"]
    calls = [e for e in r.slowlog_get(10_000) if b"EVALSHA" in bytes(e["command"]).upper()]
    app.close()
    return {
        "purged": purged,
        "calls": stats["calls"],
        "us_per_call": stats["usec_per_call"],
        "longest_call_us": max(e["duration"] for e in calls),
        "wall_ms": wall_s * 1000,
    }


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
    print(
        f"purged {figures['purged']} jobs ({args.ready} ready + {args.scheduled} scheduled) "
        f"in {figures['calls']} script calls: {figures['us_per_call']:.0f} µs a call, longest "
        f"{figures['longest_call_us']} µs; {figures['wall_ms']:.0f} ms wall"
    )
    write_report(figures, "purge_cost", args.json)


if __name__ == "__main__":
    main()
