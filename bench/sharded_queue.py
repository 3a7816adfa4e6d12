"""A sharded queue on one Redis: what a worker on ``-q mailer`` pays when ``mailer``
is spread over 4 shards rather than 1.

On one Redis the shards buy nothing (one core runs them all): this measures what
they cost, the peek at the other shards after every batch and a claim that
rotates among them. On a Redis Cluster the shards are what lets one hot queue use
several nodes (that benchmark comes with the cluster workers).

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379). Each worker is a real subprocess,
``python -m fastq worker --burst --app bench.jobs.pool -q mailer`` with
``FASTQ_REDIS_URL`` set. The worker's app does not say the queue is sharded: it
reads the count from Redis, where the producer's ``declare_queue(..., shards=4)``
wrote it. Every run must end with every job processed once, and each shard's
share processed (a chunk of ``enqueue_many`` per shard in turn).

    python -m bench.sharded_queue              # 200,000 jobs, 1 worker, median of 3 rounds
    python -m bench.sharded_queue --workers 2  # two workers at once (Redis-bound on 2 cores)
    python -m bench.sharded_queue --quick      # 20,000 jobs, once
    python -m bench.sharded_queue --json out.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import redis

from bench.harness import (
    APP_SPEC,
    ROOT,
    BenchFailure,
    Probe,
    add_json_option,
    add_progress_option,
    announce,
    check_queue,
    configure_progress,
    drain_bar,
    fresh_app,
    write_report,
)
from bench.jobs import pool as pool_jobs
from fastq.protocol import scripts
from fastq.protocol.keys import QueueKeys, shard_names
from fastq.testing.redis_server import RedisServer

POLL_S = 0.01
SHARDS = 4
TARGET = 0.9  # 4 shards drain at >= 90% of the rate of 1 on one Redis


def worker_cmd(queue: str, batch: int, namespace: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fastq",
        "--log-level",
        "WARNING",
        "worker",
        "--burst",
        "--app",
        APP_SPEC,
        "-q",
        queue,
        "--batch",
        str(batch),
        "--namespace",
        namespace,
    ]


def redis_calls(client: redis.Redis) -> int:
    """Every command Redis ran so far (``INFO commandstats``: a script call, and each
    command it ran)."""
    stats = client.info("commandstats")
    return sum(int(s.get("calls", 0)) for s in stats.values())


def drain(
    client: redis.Redis, url: str, n: int, shards: int, batch: int, workers: int
) -> dict[str, Any]:
    """Queue ``n`` no-op jobs on a queue of ``shards`` shards, run ``workers`` burst
    workers on it, and poll each shard's processed count until they all exit."""
    namespace = f"s{shards}"
    app = fresh_app(client, url, namespace)
    queue = "mailer"
    app.shard_counts.declared.pop(queue, None)  # the app object is reused across runs
    app.declare_queue(queue, shards=shards)
    pool_jobs.noop.enqueue_many([(i,) for i in range(n)], queue=queue)
    names = shard_names(queue, shards)
    stats_keys = [QueueKeys(namespace, name).stats for name in names]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "FASTQ_REDIS_URL": url, "PYTHONPATH": path}
    probe = Probe(client)
    calls0 = redis_calls(client)
    procs: list[subprocess.Popen[bytes]] = []
    exits: dict[int, tuple[int, Any]] = {}  # pid -> exit status, resource usage
    with tempfile.TemporaryFile(prefix="fastq-bench-shards-") as log:
        with drain_bar(f"-q {queue} ({shards} shards)", n) as shown:
            t0 = time.perf_counter()
            for _ in range(workers):
                procs.append(
                    subprocess.Popen(
                        worker_cmd(queue, batch, namespace),
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            deadline = t0 + 60 + n / 2000
            first = last = 0.0
            pipe = client.pipeline(transaction=False)
            polled = 0  # this script's own HGETs, taken out of the command count
            while True:
                for key in stats_keys:
                    pipe.hget(key, "processed")
                polled += len(stats_keys)
                done = sum(int(c or 0) for c in pipe.execute())
                now = time.perf_counter()
                if done and not first:
                    first = now
                if done >= n and not last:
                    last = now
                for p in procs:
                    if p.pid not in exits:
                        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                        if pid:  # the worker's CPU, from the kernel's accounting
                            exits[p.pid] = (os.waitstatus_to_exitcode(status), usage)
                ended = len(exits) == len(procs)
                shown.update(done, final=ended)
                if ended:
                    break
                if now > deadline:
                    for p in procs:
                        p.kill()
                    raise BenchFailure(f"{namespace}: {done} of {n} processed after the deadline")
                time.sleep(POLL_S)
            exited = time.perf_counter()
            for p in procs:
                p.returncode = exits[p.pid][0]  # reaped here: Popen must not wait again
            codes = [code for code, _ in exits.values()]
            cpu = sum(usage.ru_utime + usage.ru_stime for _, usage in exits.values())
        log.seek(0)
        output = log.read().decode(errors="replace")
    if any(codes):
        raise BenchFailure(f"{namespace}: a worker exited {codes}:\n{output[-3000:]}")
    redis_cpu, evalsha = probe.delta()
    calls = redis_calls(client) - calls0 - polled
    check_queue(app, queue, n, f"{namespace} queue {queue}")
    per_shard = [int(client.hget(key, "processed") or 0) for key in stats_keys]
    if per_shard != [n // shards] * shards:  # n is a multiple of 1,000 * shards
        raise BenchFailure(f"{namespace}: processed per shard {per_shard}")
    first = first or exited
    last = last or exited
    return {
        "jobs": n,
        "shards": shards,
        "workers": workers,
        "wall_s": exited - t0,
        "jobs_s": n / (exited - t0),
        "steady_jobs_s": n / (last - first) if last > first else None,
        "redis_cpu_us_per_job": redis_cpu / n * 1e6,
        "worker_cpu_us_per_job": cpu / n * 1e6,
        "evalsha_per_100_jobs": evalsha / n * 100,
        "redis_commands_per_100_jobs": calls / n * 100,
        "processed_per_shard": per_shard,
    }


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1, help="burst workers at once")
    parser.add_argument("--shards", type=int, default=SHARDS, help="of the sharded queue")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the median")
    parser.add_argument("--quick", action="store_true", help="20,000 jobs, one round")
    add_json_option(parser)
    add_progress_option(parser)
    args = parser.parse_args(argv)
    configure_progress(args.progress)
    if args.quick:
        args.jobs = min(args.jobs, 20_000)
        args.repeat = 1
    step = 1000 * args.shards  # whole chunks per shard: the per-shard check is exact
    args.jobs = max(step, args.jobs // step * step)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, batch, workers, k = args.jobs, args.batch, args.workers, args.shards
    server = RedisServer().start()
    runs: dict[str, list[dict[str, Any]]] = {"one": [], "sharded": []}
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq sharded-queue benchmark",
            f"{n:,} no-op jobs, batch {batch}, {workers} burst worker(s); throwaway "
            f"redis-server at {server.url}",
        )
        scripts.load_all(client)
        for round_ in range(args.repeat):  # interleaved, so drift hits both alike
            for name, shards in (("one", 1), ("sharded", k)):
                r = drain(client, server.url, n, shards, batch, workers)
                runs[name].append(r)
                print(
                    f"  {shards} shard{'s' if shards > 1 else ' '} (round {round_ + 1}): "
                    f"{r['jobs_s']:,.0f} jobs/s Popen→exit, first→last "
                    f"{r['steady_jobs_s'] or 0:,.0f}; Redis {r['redis_cpu_us_per_job']:.2f} "
                    f"µs/job, worker {r['worker_cpu_us_per_job']:.2f} µs/job, "
                    f"{r['redis_commands_per_100_jobs']:.1f} commands/100 jobs"
                )
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        pool_jobs.app.close()
        server.cleanup()

    results: dict[str, Any] = {}
    for name, these in runs.items():
        results[name] = sorted(these, key=lambda r: r["jobs_s"])[len(these) // 2]
        results[name]["runs_jobs_s"] = [r["jobs_s"] for r in these]
    one, sharded = results["one"], results["sharded"]
    per_round = sorted(s["jobs_s"] / o["jobs_s"] for o, s in zip(runs["one"], runs["sharded"]))
    paired = per_round[len(per_round) // 2]
    ratio = sharded["jobs_s"] / one["jobs_s"]
    cpu = {k: (r["redis_cpu_us_per_job"], r["worker_cpu_us_per_job"]) for k, r in results.items()}
    print()
    print(
        f"{'':<12}{'jobs/s':>10}{'first→last/s':>14}{'Redis µs/job':>14}{'worker µs/job':>15}"
        f"{'EVALSHA/100':>13}{'commands/100':>14}"
    )
    for label, r in (("1 shard", one), (f"{k} shards", sharded)):
        print(
            f"{label:<12}{r['jobs_s']:>10,.0f}{r['steady_jobs_s'] or 0:>14,.0f}"
            f"{r['redis_cpu_us_per_job']:>14.2f}{r['worker_cpu_us_per_job']:>15.2f}"
            f"{r['evalsha_per_100_jobs']:>13.2f}{r['redis_commands_per_100_jobs']:>14.1f}"
        )
    rounds_text = ", ".join(f"{x:.2f}" for x in per_round)
    print(
        f"ratio {k} shards / 1 shard: {ratio:.2f} (median of the rounds' ratios "
        f"{paired:.2f}: {rounds_text})"
    )
    print(
        f"Redis CPU per job, {k} shards / 1 shard: "
        f"{cpu['sharded'][0] / cpu['one'][0]:.2f}; worker CPU per job: "
        f"{cpu['sharded'][1] / cpu['one'][1]:.2f}"
    )
    verdict = "PASS" if paired >= TARGET else "BELOW"
    print(
        f"target (informational): {k} shards >= {TARGET:.0%} of 1 shard {paired:>8.1%}  {verdict}"
    )
    report = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": n,
            "batch": batch,
            "shards": k,
            "workers": workers,
            "repeat": args.repeat,
            "quick": args.quick,
        },
        "scenarios": results,
        "rounds": per_round,
        "targets": {"sharded_vs_one": {"value": ratio, "paired": paired, "pass": paired >= TARGET}},
    }
    write_report(report, "sharded_queue", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
