"""What at-most-once delivery costs a drain: one worker drains N no-op jobs of each
delivery in turn (interleaved repetitions, the best of each), on a throwaway
redis-server. An at-most-once batch waits for one more reply (its take) before it
runs, so the cost shows per batch: compare batch sizes.

    python -m bench.at_most_once_cost [--jobs 50000] [--batch 100] [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import logging
import time

import fastq
from bench.harness import add_json_option, write_report
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker

DELIVERIES = ("at_least_once", "at_most_once")


def drain_s(url: str, delivery: str, jobs: int, batch: int) -> float:
    """Seconds one in-process burst worker takes to drain ``jobs`` no-op jobs."""
    app = fastq.App(url, namespace=f"amo{time.monotonic_ns()}")

    @app.job(queue="bench", delivery=delivery)
    def noop(i: int) -> None:
        pass

    noop.enqueue_many([(i,) for i in range(jobs)])
    worker = Worker(app, ["bench"], batch_size=batch, burst=True, handle_signals=False)
    t0 = time.perf_counter()
    worker.run()
    elapsed = time.perf_counter() - t0
    stats = app.stats("bench")
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (jobs, 0, 0), stats
    app.redis.flushdb()
    app.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = RedisServer().start()
    best = {d: float("inf") for d in DELIVERIES}
    try:
        for _ in range(args.repeat):
            for delivery in DELIVERIES:
                best[delivery] = min(
                    best[delivery], drain_s(server.url, delivery, args.jobs, args.batch)
                )
    finally:
        server.cleanup()
    rates = {d: args.jobs / s for d, s in best.items()}
    figures = {
        "jobs": args.jobs,
        "batch": args.batch,
        "jobs_per_s": rates,
        "ratio": rates["at_most_once"] / rates["at_least_once"],
        "accelerated": fastq.ACCELERATED,
    }
    print(f"fastq.ACCELERATED={fastq.ACCELERATED}")
    for delivery in DELIVERIES:
        print(
            f"{delivery:>14}: {rates[delivery]:,.0f} jobs/s ({args.jobs} jobs, batch {args.batch})"
        )
    print(f"at_most_once / at_least_once: {figures['ratio']:.2f}")
    write_report(figures, "at_most_once_cost", args.json)


if __name__ == "__main__":
    main()
