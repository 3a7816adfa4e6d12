"""Many jobs in flight per child: ``fastq pool -c 2 --async-jobs 200`` on ``async def``
jobs, ``--threads 50`` on plain functions.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379); each pool is a real ``python -m fastq pool``
subprocess (``harness.Pool``), stopped with SIGTERM (it must exit 0).

0. bare    2 processes of 200 coroutines that only ``await asyncio.sleep(0.02)`` as
           often (uvloop when installed, as the pool): this machine's timers and
           loops, without a queue
1. blast   20,000 jobs that each ``await asyncio.sleep(0.02)`` (an SMTP round
           trip), ``pool -c 2 --async-jobs 200``: jobs/s from the first job
           processed to the last, against the ideal 2 x 200 / 0.02 = 20,000/s
2. tblast  the same blast from plain functions that ``time.sleep(0.02)``, in
           threads: ``pool -c 2 --threads 50``, against the ideal 2 x 50 / 0.02 =
           5,000/s
3. anoop   no-op ``async def`` jobs, ``pool -c 2 --async-jobs 200``
   anoop1  the same at ``--async-jobs 1`` (one in flight; the batch sizer sizes
           its claims)
   noop    the same no-op jobs as plain functions, ``pool -c 2``: the sync drain
           beside them

The ratios are what to read: they come from the same run on the same machine.
The exit status depends only on correctness (every job ran and was counted once,
nothing left over, every pool exited 0), never on the target.

    python -m bench.inflight                        # full run
    python -m bench.inflight --quick                # small sizes, a few seconds
    python -m bench.inflight --only blast --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any, Optional

import redis

from bench.harness import (
    ROOT,
    BenchFailure,
    Pool,
    add_json_option,
    add_progress_option,
    announce,
    check_queue,
    configure_progress,
    drain_bar,
    poll_drained,
    write_report,
)
from bench.jobs import inflight as inflight_jobs
from fastq.testing.redis_server import RedisServer

APP_SPEC = "bench.jobs.inflight"
SCENARIOS = ("bare", "blast", "tblast", "anoop", "anoop1", "noop")
CHILDREN = 2
CONCURRENCY = 200
THREADS = 50
IDEAL = CHILDREN * CONCURRENCY / inflight_jobs.SMTP_S  # 20,000 jobs/s
IDEAL_THREADS = CHILDREN * THREADS / inflight_jobs.SMTP_S  # 5,000 jobs/s
TARGET_BLAST = 0.8
# each drain's job, and its pool's options for jobs in flight
DRAINS: dict[str, tuple[Any, list[str]]] = {
    "blast": (inflight_jobs.asmtp, ["--async-jobs", str(CONCURRENCY)]),
    "tblast": (inflight_jobs.tsmtp, ["--threads", str(THREADS)]),
    "anoop": (inflight_jobs.anoop, ["--async-jobs", str(CONCURRENCY)]),
    "anoop1": (inflight_jobs.anoop, ["--async-jobs", "1"]),
    "noop": (inflight_jobs.noop, []),
}


BARE = """
import asyncio, sys, time
from fastq.runners.aio import new_event_loop
n, conc, job_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
left = [n]
async def one():
    while left[0] > 0:
        left[0] -= 1
        await asyncio.sleep(job_s)
async def main():
    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conc)))
    print(n / (time.perf_counter() - t0))
new_event_loop().run_until_complete(main())
"""


def bare(n: int) -> dict[str, Any]:
    """CHILDREN processes of CONCURRENCY coroutines sleeping SMTP_S, n jobs in all:
    jobs/s summed over the processes, each timed from its first sleep."""
    args = [str(n // CHILDREN), str(CONCURRENCY), str(inflight_jobs.SMTP_S)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BARE, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(CHILDREN)
    ]
    rates = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise BenchFailure(f"bare: a sleeper exited with status {proc.returncode}")
        rates.append(float(out))
    return {
        "jobs": n,
        "children": CHILDREN,
        "options": f"{CONCURRENCY} coroutines",
        "jobs_s": sum(rates),
    }


def drain(client: redis.Redis, url: str, scenario: str, n: int, batch: int) -> dict[str, Any]:
    """Enqueue ``n`` jobs, start a pool, time from the first job processed to the last."""
    job, options = DRAINS[scenario]
    client.flushdb()
    app = inflight_jobs.app
    app.configure(redis_url=url, namespace=scenario)
    job.enqueue_many([(i,) for i in range(n)])
    pool = Pool(url, scenario, job.queue, CHILDREN, batch, app=APP_SPEC, options=options)
    try:
        pool.start()
        # opened before the clock starts, fed by the poll the timing needs anyway
        with drain_bar(scenario, n) as shown:
            t0 = time.perf_counter()
            first_t, first_done, now = poll_drained(app, job.queue, n, pool, scenario, t0, shown)
        pool.stop(scenario)
    finally:
        pool.cleanup()
    check_queue(app, job.queue, n, scenario)
    window = now - first_t
    if first_done >= n or window <= 0:
        # drained between two polls (a small --quick run): timed from the start
        window, first_done = now - t0, 0
    return {
        "jobs": n,
        "children": CHILDREN,
        "options": " ".join(options),
        "first_to_last_s": window,
        "jobs_s": (n - first_done) / window,
    }


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, help="jobs per drain (default 20000)")
    p.add_argument("--batch", type=int, default=100, help="the most jobs per claim (default 100)")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--repeat", type=int, default=1, help="runs of each scenario (the median)")
    p.add_argument("--only", help=f"comma-separated scenarios of {','.join(SCENARIOS)}")
    add_json_option(p)
    add_progress_option(p)
    args = p.parse_args(argv)
    configure_progress(args.progress)
    args.scenarios = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if args.jobs is None:
        args.jobs = 2000 if args.quick else 20_000
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {
        "options": {"jobs": args.jobs, "batch": args.batch, "scenarios": args.scenarios},
        "scenarios": {},
        "targets": {},
    }
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        report["machine"], report["source"] = announce(
            client,
            "fastq in-flight benchmark",
            f"{args.jobs} jobs per drain, --batch {args.batch}, --repeat {args.repeat}; "
            f"throwaway redis-server at {server.url}",
        )
        for scenario in args.scenarios:
            runs = [
                bare(args.jobs)
                if scenario == "bare"
                else drain(client, server.url, scenario, args.jobs, args.batch)
                for _ in range(args.repeat)
            ]
            rates = [r["jobs_s"] for r in runs]
            figures = dict(runs[-1], jobs_s=statistics.median(rates), runs=rates)
            report["scenarios"][scenario] = figures
            print(
                f"{scenario:6} -c {CHILDREN} {figures['options']}: "
                f"{figures['jobs_s']:,.0f} jobs/s from the first job (runs: "
                + ", ".join(f"{r:,.0f}" for r in figures["runs"])
                + ")"
            )
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        server.cleanup()
    found = report["scenarios"]
    if "blast" in found:
        ratio = found["blast"]["jobs_s"] / IDEAL
        report["targets"]["blast_vs_ideal"] = {
            "value": ratio,
            "target": TARGET_BLAST,
            "pass": ratio >= TARGET_BLAST,
        }
        print(f"blast vs the ideal {IDEAL:,.0f} jobs/s: {ratio:.2f} (target >= {TARGET_BLAST})")
    if "blast" in found and "bare" in found:
        ratio = found["blast"]["jobs_s"] / found["bare"]["jobs_s"]
        report["targets"]["blast_vs_bare"] = {"value": ratio, "target": None, "pass": None}
        ideal_ratio = found["bare"]["jobs_s"] / IDEAL
        print(
            f"blast vs bare sleepers: {ratio:.2f} (bare sleepers vs the ideal: {ideal_ratio:.2f})"
        )
    if "tblast" in found:
        ratio = found["tblast"]["jobs_s"] / IDEAL_THREADS
        report["targets"]["tblast_vs_ideal"] = {"value": ratio, "target": None, "pass": None}
        print(f"tblast vs the ideal {IDEAL_THREADS:,.0f} jobs/s: {ratio:.2f}")
    for name in ("anoop", "anoop1"):
        if name in found and "noop" in found:
            ratio = found[name]["jobs_s"] / found["noop"]["jobs_s"]
            report["targets"][f"{name}_vs_noop"] = {"value": ratio, "target": None, "pass": None}
            print(f"no-op async def ({found[name]['options']}) vs no-op sync drain: {ratio:.2f}")
    write_report(report, "inflight", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
