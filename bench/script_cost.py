"""Redis-side cost of a claim + ack, per job: fastq's scripts beside the bare baseline.

Server time only (``INFO commandstats``), so the client's speed drops out. fastq is
measured with the records of ended jobs kept (the default) and switched off; with
records, the acks log the done records a batch at a time, and "fold" is what
folding them into one record per job costs afterwards (the reaper's work, off the
drain's path; ``lua/lib/records.lua``): Redis' total is the sum. The bare
baseline is also run on a server with listpack encodings switched off, which
shows what fastq's sentinel members save: without them, keys that empty after
every ack are recreated as listpacks, where each batched insert is a linear scan.

    python -m bench.script_cost [-n 100000] [--batches 100,500] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys

import orjson
import redis

import fastq
from bench.bare_consumer import BARE_ACK_LUA, BARE_CLAIM_LUA
from bench.harness import add_json_option, write_report
from fastq.protocol import records as records_of
from fastq.protocol.contracts import ACK, CLAIM
from fastq.protocol.outcomes import Outcomes
from fastq.testing.redis_server import RedisServer

NO_LISTPACK = ["--hash-max-listpack-entries", "0", "--zset-max-listpack-entries", "0"]


def server_us(client: redis.Redis) -> float:
    return float(client.info("commandstats")["cmdstat_evalsha"]["usec"])


def bare_cost(n: int, batch: int, extra_args: list[str]) -> float:
    with RedisServer(extra_args=extra_args) as srv:
        r = redis.Redis.from_url(srv.url)
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            payload = {"id": str(i), "name": "noop", "args": [i], "kwargs": {}, "queue": "bench"}
            pipe.hset("jobs", str(i), orjson.dumps(payload))
            pipe.lpush("ready", str(i))
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        claim, ack = r.script_load(BARE_CLAIM_LUA), r.script_load(BARE_ACK_LUA)
        r.config_resetstat()
        while True:
            out = r.evalsha(claim, 3, "ready", "jobs", "inflight", batch, 60000)
            if not out:
                break
            r.evalsha(ack, 2, "inflight", "jobs", *out[0::2])
        return server_us(r) / n


def fastq_cost(n: int, batch: int, records: bool = True) -> tuple[float, float]:
    """µs per job of the claims and acks, and of folding the records after."""
    with RedisServer() as srv:
        app = fastq.App(srv.url, namespace="cost")
        app.enqueue_many("noop", [(i,) for i in range(n)], queue="bench")
        keys = app.keys("bench")
        if not records:
            app.keep_records("bench", max_len=0)
        claim_keys, ack_keys = CLAIM.keys_for(keys, "w"), ACK.keys_for(keys, "w")
        client = app.redis
        client.config_resetstat()
        while True:
            reply = CLAIM.call(client, claim_keys, CLAIM.argv("w", batch, 60000, 1000))
            ids = reply.ids
            if not ids:
                break
            argv = Outcomes(done=ids).ack_argv(10**9, 1000, "host:123:w0.1")
            ACK.call(client, ack_keys, argv)
        cost = server_us(client) / n
        client.config_resetstat()
        records_of.fold(client, keys)
        fold = server_us(client) / n if records else 0.0
        app.close()
        return cost, fold


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=100_000)
    parser.add_argument("--batches", default="100,500")
    add_json_option(parser)
    args = parser.parse_args()
    rows = []
    print(f"Redis-side µs per job (claim + ack), {args.jobs:,} no-op jobs")
    print(
        f"{'batch':>6} {'fastq':>8} {'fold':>6} {'no records':>11} {'bare':>8}"
        f" {'bare, no listpack':>18}"
    )
    for batch in (int(b) for b in args.batches.split(",")):
        fastq_us, fold_us = fastq_cost(args.jobs, batch)
        row = {
            "batch": batch,
            "fastq_us": fastq_us,
            "fold_us": fold_us,
            "fastq_no_records_us": fastq_cost(args.jobs, batch, records=False)[0],
            "bare_us": bare_cost(args.jobs, batch, []),
            "bare_no_listpack_us": bare_cost(args.jobs, batch, NO_LISTPACK),
        }
        rows.append(row)
        fastq_us, bare_us, no_lp_us = row["fastq_us"], row["bare_us"], row["bare_no_listpack_us"]
        off_us = row["fastq_no_records_us"]
        print(
            f"{batch:>6} {fastq_us:>8.2f} {fold_us:>6.2f} {off_us:>11.2f} {bare_us:>8.2f}"
            f" {no_lp_us:>18.2f}"
        )
    write_report({"jobs": args.jobs, "rows": rows}, "script_cost", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
