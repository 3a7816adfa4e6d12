"""Redis CPU per job: what one Redis pays to enqueue, claim and acknowledge a job,
beside the floor measured in the same run on the same server.

One Redis serves every worker host of a deployment, so its CPU per job is the
ceiling of the whole deployment's rate. Each variant enqueues N no-op jobs with
``enqueue_many`` and drains them with one burst worker (a forked child, batch 100);
Redis' own CPU (``INFO cpu``: user + system of the server process) is read around
each step (the fold of the done records the acks logged, which a reaper does after a
drain, included), and ``INFO commandstats`` says what the scripts cost per job.

The floor is the same envelopes pushed with pipelined ``LPUSH`` (one job a command)
and popped with ``RPOP key 100``: no lease, no ack, no record. Variants:

    plain       the common blast
    tags        each job with one tag
    unique      each job with its own unique key (the lock taken and released)
    batch       inside ``with app.batch()``: counted for the batch, which ends
    no-records  the queue keeps no records of ended jobs (``keep_records(max_len=0)``)

Runs alternate the variants and keep each one's best (least CPU) of ``--repeat``.

    python -m bench.redis_cost [-n 200000] [--variants plain,tags,...] [--repeat 3]
                               [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any, Callable, Optional

import redis

import fastq
from bench.harness import (
    BenchFailure,
    add_json_option,
    announce,
    run_child,
    wait_child,
    write_report,
)
from fastq._accel import codec
from fastq.protocol import records, scripts
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker

QUEUE = "cost"
BATCH = 100  # jobs per claim of the drain, and per RPOP of the floor
PIPELINE = 1000  # commands per pipeline of the floor's push, and calls per enqueue_many
VARIANTS = ("plain", "tags", "unique", "batch", "no-records")


def noop(i: int) -> None:
    """The job every variant enqueues and drains."""


def redis_cpu_s(client: redis.Redis) -> float:
    """The server process' CPU so far (user + system), in seconds."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def script_usec(client: redis.Redis) -> tuple[int, int]:
    """Calls and µs of the scripts run since the last reset (``INFO commandstats``:
    Redis counts EVALSHA as one command, whichever script)."""
    calls = usec = 0
    for section, stats in client.info("commandstats").items():
        if section in ("cmdstat_evalsha", "cmdstat_eval"):
            calls, usec = calls + int(stats["calls"]), usec + int(stats["usec"])
    return calls, usec


def floor(client: redis.Redis, n: int) -> dict[str, float]:
    """µs of Redis CPU per job to LPUSH the jobs' envelopes and RPOP them back."""
    client.flushdb()
    envs = codec.encode_calls([(i,) for i in range(n)], codec.envelope_tail("noop", 0, {}))
    gc.collect()
    before = redis_cpu_s(client)
    pipe = client.pipeline(transaction=False)
    for start in range(0, n, PIPELINE):
        for env in envs[start : start + PIPELINE]:
            pipe.lpush("floor", env)
        pipe.execute()
    pushed = redis_cpu_s(client)
    popped = 0
    while True:
        got = client.rpop("floor", BATCH)
        if not got:
            break
        popped += len(got)  # type: ignore[arg-type]
    done = redis_cpu_s(client)
    if popped != n:
        raise BenchFailure(f"floor: popped {popped} of {n}")
    return {
        "enqueue_us": (pushed - before) * 1e6 / n,
        "drain_us": (done - pushed) * 1e6 / n,
        "fold_us": 0.0,
        "total_us": (done - before) * 1e6 / n,
    }


def enqueue(app: fastq.App, job: Any, n: int, variant: str) -> None:
    """Enqueue ``n`` jobs as ``variant`` says, ``PIPELINE`` calls at a time."""
    chunks = [[(i,) for i in range(lo, min(n, lo + PIPELINE))] for lo in range(0, n, PIPELINE)]
    if variant == "batch":
        with app.batch(id="blast"):  # closed on leaving: it ends with its last job
            for calls in chunks:
                job.enqueue_many(calls)
        return
    for calls in chunks:
        if variant == "tags":
            job.enqueue_many(calls, tags=["blast"])
        elif variant == "unique":
            # each call its own key (its arguments): a lock a job, as users use it
            job.enqueue_many(calls, unique_for_s=3600)
        else:
            job.enqueue_many(calls)


def fastq_cost(url: str, client: redis.Redis, n: int, variant: str, run: int) -> dict[str, Any]:
    """µs of Redis CPU per job for the enqueue and for a burst worker's drain."""
    client.flushdb()
    app = fastq.App(url, namespace=f"cost{run}")
    try:
        job = app.job(queue=QUEUE)(noop)
        app.declare_queue(QUEUE)
        if variant == "no-records":
            app.keep_records(QUEUE, max_len=0)
        scripts.load_all(client)
        app.redis.ping()
        gc.collect()
        client.config_resetstat()
        before = redis_cpu_s(client)
        enqueue(app, job, n, variant)
        enqueued = redis_cpu_s(client)
        enqueue_calls = script_usec(client)
        stats = app.stats(QUEUE)
        if stats["ready"] != n:
            raise BenchFailure(f"{variant}: {stats['ready']} of {n} jobs ready after the enqueue")
        client.config_resetstat()
        start = redis_cpu_s(client)
        wait_child(run_child(_drain(app)), f"{variant} drain")
        drained = redis_cpu_s(client)
        drain_calls = script_usec(client)
        stats = app.stats(QUEUE)
        if (stats["processed"], stats["ready"], stats["inflight"]) != (n, 0, 0):
            raise BenchFailure(f"{variant}: the drain left {stats}")
        # the records the acks logged, folded as a reaper does after a drain: the
        # same Redis, off the drain's path
        fold_from = redis_cpu_s(client)
        records.fold(client, app.keys(QUEUE))
        folded = redis_cpu_s(client)
        if variant == "batch":
            status = app.batch_status("blast")
            if status is None or status.state != "ended" or status.done != n:
                raise BenchFailure(f"batch: the batch did not end with {n} done: {status}")
    finally:
        app.close()
    return {
        "enqueue_us": (enqueued - before) * 1e6 / n,
        "drain_us": (drained - start) * 1e6 / n,
        "fold_us": (folded - fold_from) * 1e6 / n,
        "total_us": (enqueued - before + drained - start + folded - fold_from) * 1e6 / n,
        "enqueue_script_us": enqueue_calls[1] / n,
        "drain_script_us": drain_calls[1] / n,
        "drain_script_calls": drain_calls[0],
    }


def _drain(app: fastq.App) -> Callable[[], None]:
    def child() -> None:
        Worker(app, [QUEUE], batch_size=BATCH, burst=True).run()

    return child


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, help="jobs per variant (default 200000)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="which, comma-separated")
    p.add_argument("--repeat", type=int, help="runs of each variant, best kept (default 3)")
    add_json_option(p)
    p.add_argument("--quick", action="store_true", help="CI smoke: 3000 jobs, 1 run")
    args = p.parse_args(argv)
    if args.jobs is None:
        args.jobs = 3000 if args.quick else 200_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        p.error(f"unknown variants {unknown}: pick from {', '.join(VARIANTS)}")
    if args.jobs < 1 or args.repeat < 1:
        p.error("--jobs and --repeat must be positive")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n = args.jobs
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "Redis CPU per job",
            f"{n:,} no-op jobs a variant, enqueue_many + one burst worker (batch {BATCH}), "
            f"best of {args.repeat}, alternated; throwaway redis-server at {server.url}",
        )
        runs: list[dict[str, Any]] = []
        for rep in range(args.repeat):
            run: dict[str, Any] = {"floor": floor(client, n)}
            for variant in args.variants:
                run[variant] = fastq_cost(server.url, client, n, variant, rep)
            runs.append(run)
            print(
                f"  run {rep + 1}/{args.repeat}: µs of Redis CPU a job: "
                + ", ".join(f"{name} {r['total_us']:.2f}" for name, r in run.items())
            )
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        server.cleanup()

    names = ["floor", *args.variants]
    best = {name: min((r[name] for r in runs), key=lambda m: m["total_us"]) for name in names}
    floor_us = best["floor"]["total_us"]
    print()
    print(
        f"{'µs of Redis CPU a job':<24}{'enqueue':>9}{'claim+ack':>11}{'fold':>7}{'total':>9}"
        f"{'× floor':>9}{'EVALSHA':>9}"
    )
    for name in names:
        m = best[name]
        scripts_us = m.get("enqueue_script_us", 0.0) + m.get("drain_script_us", 0.0)
        print(
            f"{name:<24}{m['enqueue_us']:>9.2f}{m['drain_us']:>11.2f}{m['fold_us']:>7.2f}"
            f"{m['total_us']:>9.2f}"
            f"{m['total_us'] / floor_us:>9.1f}"
            + (f"{scripts_us:>9.2f}" if name != "floor" else f"{'':>9}")
        )
    print()
    print(
        "EVALSHA: the µs Redis counted inside the scripts (INFO commandstats), enqueue and "
        "drain: wall time, which a loaded box stretches past the CPU time"
    )
    report: dict[str, Any] = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": n,
            "batch": BATCH,
            "repeat": args.repeat,
            "variants": args.variants,
            "quick": args.quick,
        },
        "runs": runs,
        "best": best,
        "ratios_to_floor": {name: best[name]["total_us"] / floor_us for name in names},
    }
    write_report(report, "redis_cost", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
