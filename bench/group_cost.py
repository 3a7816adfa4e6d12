"""What groups cost: Redis' time per job of a drain (enqueue, then claim + ack) of
the same no-op jobs plain and spread over 1,000 groups, and how long a new small
group waits behind one huge group.

Server time only (``INFO commandstats``: the scripts' EVALSHA), as
``bench.script_cost``; the runs of each batch size alternate plain and grouped
(``--repeat``) and each reports its median. "Behind a big group": a group of
``--big`` jobs, then one of 10; how many claims of ``--batch`` jobs pass before
the small group's first job is claimed (1: the first claim takes it).

    python -m bench.group_cost [-n 100000] [--groups 1000] [--batches 100,500]
        [--repeat 3] [--big 1000000] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Optional

import fastq
from bench.harness import add_json_option, write_report
from fastq.protocol.contracts import ACK, CLAIM
from fastq.protocol.outcomes import Outcomes
from fastq.testing.redis_server import RedisServer


def evalsha_us(client: fastq.App) -> float:
    stats = client.redis.info("commandstats").get("cmdstat_evalsha")
    return float(stats["usec"]) if stats else 0.0


def drain_cost(n: int, groups: int, batch: int) -> tuple[float, float]:
    """µs per job of the enqueue, and of the claims and acks, of ``n`` jobs in
    ``groups`` groups (0: none)."""
    with RedisServer() as srv:
        app = fastq.App(srv.url, namespace="cost")
        app.declare_queue("bench")
        app.redis.config_resetstat()
        if groups:
            per = n // groups
            for g in range(groups):
                app.enqueue_many("noop", [(i,) for i in range(per)], queue="bench", group=f"g{g}")
        else:
            app.enqueue_many("noop", [(i,) for i in range(n)], queue="bench")
        enqueue_us = evalsha_us(app) / n
        keys = app.keys("bench")
        claim_keys, ack_keys = CLAIM.keys_for(keys, "w"), ACK.keys_for(keys, "w")
        client = app.redis
        client.config_resetstat()
        drained = 0
        while True:
            ids = CLAIM.call(client, claim_keys, CLAIM.argv("w", batch, 60000, 1000)).ids
            if not ids:
                break
            drained += len(ids)
            ACK.call(client, ack_keys, Outcomes(done=ids).ack_argv(10**9, 1000, "host:1:w0.1"))
        assert drained == n, (drained, n)
        cost = evalsha_us(app) / n
        app.close()
        return enqueue_us, cost


def claims_before_small(big: int, batch: int) -> tuple[int, Optional[int]]:
    """Claims of ``batch`` until a 10-job group enqueued after one of ``big`` jobs
    has its first job claimed, and its position in that claim (from 1)."""
    with RedisServer() as srv:
        app = fastq.App(srv.url, namespace="cost")
        app.declare_queue("bench")
        for lo in range(0, big, 100_000):
            calls = [(i,) for i in range(lo, min(lo + 100_000, big))]
            app.enqueue_many("noop", calls, queue="bench", group="big")
        app.enqueue_many("noop", [(i,) for i in range(10)], queue="bench", group="small")
        jobs = app.keys("bench").jobs
        claim_keys = CLAIM.keys_for(app.keys("bench"), "w")
        for claims in range(1, big // batch + 2):
            ids = CLAIM.call(app.redis, claim_keys, CLAIM.argv("w", batch, 60000, 1000)).ids
            envs = app.redis.hmget(jobs, ids)
            for at, env in enumerate(envs, 1):
                if env is not None and b'"g":"small"' in env:
                    app.close()
                    return claims, at
        app.close()
        return -1, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--batches", default="100,500")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big", type=int, default=1_000_000)
    add_json_option(parser)
    args = parser.parse_args()
    print(
        f"Redis-side µs per job, {args.jobs:,} no-op jobs, plain and in {args.groups:,} "
        f"groups (median of {args.repeat})"
    )
    print(
        f"{'batch':>6} {'enqueue plain':>14} {'grouped':>8} {'claim+ack plain':>16}"
        f" {'grouped':>8} {'plain/grouped':>14}"
    )
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        plain, grouped = [], []
        for _ in range(args.repeat):
            plain.append(drain_cost(args.jobs, 0, batch))
            grouped.append(drain_cost(args.jobs, args.groups, batch))
        row = {
            "batch": batch,
            "enqueue_plain_us": statistics.median(p[0] for p in plain),
            "enqueue_grouped_us": statistics.median(g[0] for g in grouped),
            "drain_plain_us": statistics.median(p[1] for p in plain),
            "drain_grouped_us": statistics.median(g[1] for g in grouped),
        }
        total_plain = row["enqueue_plain_us"] + row["drain_plain_us"]
        total_grouped = row["enqueue_grouped_us"] + row["drain_grouped_us"]
        row["ratio"] = total_plain / total_grouped
        rows.append(row)
        print(
            f"{batch:>6} {row['enqueue_plain_us']:>14.2f} {row['enqueue_grouped_us']:>8.2f}"
            f" {row['drain_plain_us']:>16.2f} {row['drain_grouped_us']:>8.2f}"
            f" {row['ratio']:>14.2f}"
        )
    batch = int(args.batches.split(",")[0])
    claims, at = claims_before_small(args.big, batch)
    print(
        f"a 10-job group behind one of {args.big:,}: its first job in claim #{claims} "
        f"of {batch} jobs, at position {at}"
    )
    report = {
        "jobs": args.jobs,
        "groups": args.groups,
        "repeat": args.repeat,
        "rows": rows,
        "behind_big": {"big": args.big, "batch": batch, "claim": claims, "position": at},
    }
    write_report(report, "group_cost", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
