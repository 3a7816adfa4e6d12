"""Batch benchmark: a blast drained by ``fastq pool`` in a batch, beside the same blast
without one, in one run; and what a batch costs Redis in memory and in time.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379). Each round drains N no-op jobs twice, once plain
and once enqueued inside ``with app.batch(on_complete=...)`` (the order alternates
round by round, so drift hits both alike), each by a warm ``pool -c C`` (already up
and idle on the paused queue when the resume lets the whole blast at it; the clock
starts then and stops when N jobs are processed; the callback runs on a queue of
its own, which the pool serves in both drains). Memory: ``used_memory`` of the
blast queued (after ``MEMORY PURGE``) less the empty server's, and again once it is
drained (and the batch ended); the batch's figure less the plain one, per job.
Cost: Redis µs per job (``INFO commandstats``) of enqueue, claim and ack driven
straight through fastq's scripts (as ``bench.script_cost``), in a batch and
not: where a batch's time goes if its drain is slower.

    python -m bench.batch_drain                       # 200,000 jobs, -c 2, 3 rounds
    python -m bench.batch_drain -n 50000 --repeat 5 --cost-jobs 50000
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Optional

import orjson
import redis

from bench.harness import (
    WARM_SETTLE_S,
    BenchFailure,
    Pool,
    Probe,
    add_json_option,
    add_progress_option,
    announce,
    check_queue,
    configure_progress,
    drain_bar,
    poll_drained,
    write_report,
)
from bench.jobs import batch as batch_jobs
from fastq.protocol import records, scripts
from fastq.protocol.contracts import ACK, CLAIM
from fastq.protocol.keys import BatchKeys
from fastq.protocol.outcomes import Outcomes
from fastq.testing.redis_server import RedisServer

APP_SPEC = "bench.jobs.batch"
QUEUE = batch_jobs.noop.queue
CALLBACKS = batch_jobs.called_back.queue  # served by the pool in both drains, alike
TARGET_RATIO = 0.9  # a batched drain at >= 90% of a plain one
CALLBACK_TIMEOUT_S = 30.0


def used_memory(client: redis.Redis) -> int:
    client.execute_command("MEMORY", "PURGE")
    return int(client.info("memory")["used_memory"])


def batch_key_bytes(client: redis.Redis, app: Any, batch_id: Optional[str]) -> int:
    """``MEMORY USAGE`` (every field counted) of the keys batches add: the queue's
    batched hash (job id -> batch id), its shares and due set; the batch's hash,
    the namespace's index of batches and its work zset."""
    keys = app.keys(QUEUE)
    names = [keys.batched, keys.batches, keys.batches_due]
    if batch_id is not None:
        own = BatchKeys(app.namespace, batch_id)
        names += [own.batch, own.index, own.work]
    return sum(int(client.memory_usage(name, samples=0) or 0) for name in names)


def keyspace_bytes(client: redis.Redis, namespace: str) -> int:
    """``MEMORY USAGE`` (every element counted) of every key of ``namespace``: what
    its data take, without the allocator's and the server's own noise."""
    names = list(client.scan_iter(match=f"{namespace}:*", count=1000))
    return sum(int(client.memory_usage(name, samples=0) or 0) for name in names)


def fresh(client: redis.Redis, url: str, namespace: str) -> Any:
    """The bench's app on an emptied server, in ``namespace``."""
    client.flushdb()
    app = batch_jobs.app
    app.configure(redis_url=url, namespace=namespace)
    app.redis.ping()
    return app


def enqueue_blast(app: Any, n: int, batched: bool) -> tuple[float, Optional[str]]:
    """N no-op jobs (in a batch, closed at once): seconds taken and the batch's id."""
    calls = [(i,) for i in range(n)]
    t0 = time.perf_counter()
    if not batched:
        batch_jobs.noop.enqueue_many(calls)
        return time.perf_counter() - t0, None
    with app.batch(on_complete=batch_jobs.called_back, description="bench") as batch:
        batch_jobs.noop.enqueue_many(calls)
    return time.perf_counter() - t0, batch.id


def wait_called_back(client: redis.Redis, app: Any, batch_id: str) -> dict[str, Any]:
    """The note ``called_back`` left, once it ran; checked against the blast."""
    key = f"{app.namespace}:called_back"
    deadline = time.monotonic() + CALLBACK_TIMEOUT_S
    while not client.llen(key):
        if time.monotonic() > deadline:
            raise BenchFailure(
                f"batch {batch_id}: on_complete did not run: {app.batch_status(batch_id)}"
            )
        time.sleep(0.005)
    notes = [orjson.loads(raw) for raw in client.lrange(key, 0, -1)]
    return notes[0] | {"calls": len(notes)}


def drain(
    client: redis.Redis, url: str, n: int, concurrency: int, claim: int, batched: bool
) -> dict[str, Any]:
    """One warm drain of N jobs, plain or in a batch, with the memory around it."""
    label = "batch" if batched else "plain"
    app = fresh(client, url, label)
    empty = used_memory(client)
    app.pause(QUEUE)
    enqueue_s, batch_id = enqueue_blast(app, n, batched)
    queued = used_memory(client)
    queued_keys = batch_key_bytes(client, app, batch_id)
    queued_keyspace = keyspace_bytes(client, label)
    pool = Pool(url, label, f"{QUEUE},{CALLBACKS}", concurrency, claim, app=APP_SPEC)
    try:
        pool.start()
        pool.workers()
        time.sleep(WARM_SETTLE_S)  # connected and idle, on the paused queue
        with drain_bar(label, n) as shown:
            probe = Probe(client)
            t0, t0_unix = time.perf_counter(), time.time()
            app.resume(QUEUE)
            _, _, now = poll_drained(app, QUEUE, n, pool, label, t0, shown)
            wall = now - t0
            redis_cpu, evalsha = probe.delta()
        note: dict[str, Any] = {}
        if batch_id is not None:
            note = wait_called_back(client, app, batch_id)
            deadline = time.monotonic() + CALLBACK_TIMEOUT_S
            while app.stats(CALLBACKS)["processed"] < 1:  # its ack is in
                if time.monotonic() > deadline:
                    raise BenchFailure("batch: the callback's ack never came")
                time.sleep(0.005)
        pool.stop(label)
    finally:
        pool.cleanup()
    check_queue(app, QUEUE, n, label)
    if batch_id is not None:
        check_queue(app, CALLBACKS, 1, label)
    result: dict[str, Any] = {
        "jobs": n,
        "wall_s": wall,
        "jobs_s": n / wall,
        "enqueue_s": enqueue_s,
        "redis_cpu_us_per_job": redis_cpu / n * 1e6,
        "evalsha_per_100_jobs": evalsha / n * 100,
        "queued_bytes": queued - empty,
    }
    if batch_id is not None:
        status = app.batch_status(batch_id)
        told = note["status"]
        counts = (told["total"], told["done"], told["dead"], told["cancelled"], note["calls"])
        if status is None or status.state != "ended" or counts != (n, n, 0, 0, 1):
            raise BenchFailure(f"batch: on_complete was told {told} ({note['calls']} calls)")
        # from the resume to the end of the batch, and to its callback's run
        result["ended_after_s"] = (status.ended_at or 0) - t0_unix
        result["called_back_after_s"] = note["at"] - t0_unix
    # records of ended jobs as the reaper leaves them, whenever it last folded them
    records.fold(client, app.keys(QUEUE))
    # what stays: the records, the namespace's index of batches and the ended
    # batch's hash (7 days)
    result["drained_bytes"] = used_memory(client) - empty
    result["queued_keyspace_bytes"] = queued_keyspace
    result["drained_keyspace_bytes"] = keyspace_bytes(client, label)
    result["queued_batch_key_bytes"] = queued_keys
    result["drained_batch_key_bytes"] = batch_key_bytes(client, app, batch_id)
    return result


# -- Redis µs per job, scripts driven straight ----------------------------------------


def script_cost(n: int, claim: int, batched: bool) -> dict[str, float]:
    """Redis µs per job of enqueue, claim and ack (``INFO commandstats`` read around
    each call), on a server of its own."""
    with RedisServer() as srv:
        app = batch_jobs.app
        app.configure(redis_url=srv.url, namespace="cost")
        client = app.redis
        scripts.load_all(client)
        client.config_resetstat()
        enqueue_blast(app, n, batched)
        enqueue_us = _evalsha_us(client) / n
        keys = app.keys(QUEUE)
        claim_keys, ack_keys = CLAIM.keys_for(keys, "w"), ACK.keys_for(keys, "w")
        ended: list[str] = []
        claim_us = ack_us = 0.0
        while True:
            before = _evalsha_us(client)
            reply = CLAIM.call(client, claim_keys, CLAIM.argv("w", claim, 60000, 1000))
            claimed = _evalsha_us(client)
            claim_us += claimed - before
            if not reply.ids:
                break
            batch_of: dict[bytes, str] = {}  # as a worker learns it from the claim
            reply.decode({}, batch_of)
            argv = Outcomes(done=reply.ids).ack_argv(10**9, 1000, "host:123:w0.1", 0, batch_of)
            ended += ACK.batches_ended(scripts.call(client, ACK.script, ack_keys, argv))
            ack_us += _evalsha_us(client) - claimed
        if batched and len(ended) != 1:
            raise BenchFailure(f"cost: the acks ended {ended}, not the one batch")
        return {"enqueue_us": enqueue_us, "claim_us": claim_us / n, "ack_us": ack_us / n}


def _evalsha_us(client: redis.Redis) -> float:
    stats = client.info("commandstats")
    return float(stats.get("cmdstat_evalsha", {}).get("usec", 0)) + float(
        stats.get("cmdstat_eval", {}).get("usec", 0)
    )


# -- the run -----------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, default=200_000, help="jobs per drain")
    p.add_argument("-c", "--concurrency", type=int, default=2, help="pool -c (default 2)")
    p.add_argument("--batch", type=int, default=100, help="jobs per claim (default 100)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of both drains (default 3)")
    p.add_argument(
        "--cost-jobs", type=int, default=100_000, help="jobs of the script-cost runs (0: none)"
    )
    add_json_option(p)
    add_progress_option(p)
    args = p.parse_args(argv)
    configure_progress(args.progress)
    return args


def median(runs: list[dict[str, Any]], key: str) -> float:
    values = sorted(r[key] for r in runs)
    return float(values[len(values) // 2])


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, c = args.jobs, args.concurrency
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "batch": []}
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq batch benchmark",
            f"{n:,} no-op jobs, warm pool -c {c}, claims of {args.batch}, {args.repeat} rounds"
            f" of a plain drain and a batched one; throwaway redis-server at {server.url}",
        )
        scripts.load_all(client)
        # a small drain first, untimed: what a server allocates once (the first drain
        # of a fresh server leaves ~800 KB more used_memory) is not counted to either
        drain(client, server.url, min(n, 2000), c, args.batch, True)
        for round_ in range(args.repeat):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            for batched in order:
                r = drain(client, server.url, n, c, args.batch, batched)
                label = "batch" if batched else "plain"
                runs[label].append(r)
                extra = ""
                if batched:
                    extra = (
                        f"; batch ended {r['ended_after_s']:.2f} s after the resume,"
                        f" on_complete ran at {r['called_back_after_s']:.2f} s"
                    )
                print(
                    f"  {label} (round {round_ + 1}): {r['jobs_s']:,.0f} jobs/s"
                    f" ({r['wall_s']:.2f} s), Redis {r['redis_cpu_us_per_job']:.2f} µs/job,"
                    f" enqueue {n / r['enqueue_s']:,.0f} jobs/s{extra}"
                )
        client.close()
        cost: dict[str, dict[str, float]] = {}
        if args.cost_jobs:
            # the least of --repeat alternated runs: a busy box only ever adds to them
            tries: dict[str, list[dict[str, float]]] = {"plain": [], "batch": []}
            for _ in range(args.repeat):
                for label, batched in (("plain", False), ("batch", True)):
                    tries[label].append(script_cost(args.cost_jobs, args.batch, batched))
            cost = {
                label: {key: min(t[key] for t in these) for key in these[0]}
                for label, these in tries.items()
            }
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        batch_jobs.app.close()
        server.cleanup()

    ratios = [b["jobs_s"] / p["jobs_s"] for p, b in zip(runs["plain"], runs["batch"])]
    ratio = sorted(ratios)[len(ratios) // 2]
    plain_jobs_s, batch_jobs_s = median(runs["plain"], "jobs_s"), median(runs["batch"], "jobs_s")
    per_job_queued = (
        median(runs["batch"], "queued_bytes") - median(runs["plain"], "queued_bytes")
    ) / n
    per_job_drained = (
        median(runs["batch"], "drained_bytes") - median(runs["plain"], "drained_bytes")
    ) / n
    print()
    print(f"plain drain  {plain_jobs_s:>10,.0f} jobs/s (median of {args.repeat})")
    print(f"batch drain  {batch_jobs_s:>10,.0f} jobs/s (median of {args.repeat})")
    print(
        f"batch / plain {ratio:.2f} (median of the rounds' ratios:"
        f" {', '.join(f'{x:.2f}' for x in ratios)})"
    )
    print(
        f"Redis CPU per job: plain {median(runs['plain'], 'redis_cpu_us_per_job'):.2f} µs,"
        f" batch {median(runs['batch'], 'redis_cpu_us_per_job'):.2f} µs"
    )
    keyspace_queued, keyspace_drained = (
        (median(runs["batch"], key) - median(runs["plain"], key)) / n
        for key in ("queued_keyspace_bytes", "drained_keyspace_bytes")
    )
    keys_queued = median(runs["batch"], "queued_batch_key_bytes") / n
    keys_drained = median(runs["batch"], "drained_batch_key_bytes")
    print(
        f"Redis memory per job, queued, in a batch: {per_job_queued:+.1f} B (used_memory,"
        f" less the plain blast's); every key's MEMORY USAGE {keyspace_queued:+.1f} B, the"
        f" batch's keys {keys_queued:.1f} B"
    )
    print(
        f"Redis memory per job once the batch ended: {per_job_drained:+.2f} B (used_memory,"
        f" less the plain drain's); every key's MEMORY USAGE {keyspace_drained:+.2f} B;"
        f" the batch's keys {keys_drained:,} B in all"
        f" ({keys_drained / n:.4f} B per job)"
    )
    for label, figures in cost.items():
        print(
            f"Redis µs per job, scripts driven straight ({args.cost_jobs:,} jobs, least of"
            f" {args.repeat}), {label}:"
            f" enqueue {figures['enqueue_us']:.2f}, claim {figures['claim_us']:.2f},"
            f" ack {figures['ack_us']:.2f}"
        )
    verdict = "PASS" if ratio >= TARGET_RATIO else "BELOW"
    print(f"target: batch drain >= {TARGET_RATIO:.0%} of plain: {ratio:.1%} {verdict}")
    report = {
        "machine": machine,
        "source": source,
        "options": {"jobs": n, "concurrency": c, "batch": args.batch, "repeat": args.repeat},
        "runs": runs,
        "plain_jobs_s": plain_jobs_s,
        "batch_jobs_s": batch_jobs_s,
        "ratio": ratio,
        "ratios": ratios,
        "queued_bytes_per_job": per_job_queued,
        "drained_bytes_per_job": per_job_drained,
        "queued_keyspace_bytes_per_job": keyspace_queued,
        "drained_keyspace_bytes_per_job": keyspace_drained,
        "queued_batch_key_bytes_per_job": keys_queued,
        "drained_batch_key_bytes": keys_drained,
        "script_cost": cost,
        "target": {"value": ratio, "pass": ratio >= TARGET_RATIO},
    }
    write_report(report, "batch_drain", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
