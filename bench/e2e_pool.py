"""Pool benchmark: ``fastq pool`` run as a user runs it, against a bare baseline, in one run.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379). Each pool is a real subprocess,
``python -m fastq pool -c N --app bench.jobs.pool ...`` with ``FASTQ_REDIS_URL``
set, stopped with SIGTERM at the end of its scenario (it must exit 0):

1. bare     two consumers forked from this (warm) process, draining N jobs with
            bench/bare_consumer.py's Lua claim/ack
   launched the same two consumers launched as fresh processes
            (``python -m bench.bare_consumer``): interpreter start and redis-py
            import included, as they are in a pool's figures
2. c2       ``pool -c 2`` draining N no-op jobs enqueued beforehand
3. c32      ``pool -c 32`` draining the same N no-op jobs
   c2warm, c32warm  the same drains by a pool already up and idle when all N jobs
            appear at once (a blast reaching a deployed pool): no start-up in them
4. smtp     ``pool -c 32`` draining 5 ms jobs, against the ideal 32 / 5 ms, and
            against 32 bare processes that only sleep 5 ms as often (this
            machine's timers overshoot every sleep)
   smtpwarm the same by a pool already up and idle, as c32warm
5. kill     ``pool -c 2`` running 50 ms jobs: SIGKILL a worker child, time until
            the jobs it held are back in the ready list
6. memory   USS of each worker child of ``pool -c 2``, idle and after 1,000,000 jobs

The ratios are what to read: they come from the same run on the same machine.
The exit status depends only on correctness (every job ran exactly as counted,
nothing left over, every pool exited 0), never on the targets.

    python -m bench.e2e_pool                 # full run: 200,000 jobs, 1,000,000 for memory
    python -m bench.e2e_pool --quick         # small sizes, well under a minute
    python -m bench.e2e_pool --only c2,c32 --json out.json
    python -m bench.e2e_pool -n 20000 --repeat 3 --only c2,c32   # a cold -c 32 on a blast
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import psutil
import redis

from bench.bare_consumer import BareKeys, bare_consume
from bench.bare_consumer import load_scripts as load_bare_scripts
from bench.harness import (
    POLL_S,
    POOL_OPTIONS,
    ROOT,
    BenchFailure,
    Pool,
    Probe,
    add_json_option,
    add_progress_option,
    announce,
    bare_enqueue,
    check_bare_drained,
    check_queue,
    configure_progress,
    drain_bar,
    fresh_app,
    polled_drain_bar,
    pool_drain,
    run_child,
    wait_child,
    write_report,
)
from bench.jobs import pool as pool_jobs  # the bench enqueues the pool's own jobs
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer

SCENARIOS = (
    "bare",
    "launched",
    "c2",
    "c32",
    "c2warm",
    "c32warm",
    "smtp",
    "smtpwarm",
    "kill",
    "memory",
)
SMTP_CONCURRENCY = 32
SMTP_JOB_S = 0.005
SMTP_IDEAL = SMTP_CONCURRENCY / SMTP_JOB_S  # 6,400 jobs/s: every child always sleeping
KILL_BATCH = 20
SLOW_JOB_S = 0.05  # pool_jobs.slow
TARGET_C2 = 0.70  # -c 2 drain >= 70% of the bare two-process drain
TARGET_C32 = 0.85  # -c 32 drain within 15% of -c 2
TARGET_SMTP = 0.85  # 5 ms jobs at >= 85% of the ideal
TARGET_KILL_MS = 1000.0  # SIGKILL to claimable < 1 s
MEMORY_NOISE_MIB = 2.0  # USS growth below this is noise (allocator arenas, COW pages)
MIB = 1 << 20


# -- 1. the bare two-process baseline ------------------------------------------------


def bare_two(client: redis.Redis, url: str, n: int, batch: int, launched: bool) -> dict[str, Any]:
    """Two bare consumers drain ``n`` jobs: forked from this (warm) process, or
    ``launched`` as two fresh ``python -m bench.bare_consumer`` processes, which
    start an interpreter and import redis-py as a pool's master does."""
    client.flushdb()
    namespace = "bare2" + ("launched" if launched else "forked")
    shas = load_bare_scripts(client)  # loaded beforehand, as fastq's are
    keys = BareKeys(namespace)
    bare_enqueue(client, keys, n)
    # the consumers read no count: the bar polls acked jobs on a connection of its own
    watch = redis.Redis.from_url(url)
    probe = Probe(client)
    t0 = time.perf_counter()
    if launched:
        cmd = [sys.executable, "-m", "bench.bare_consumer", url, namespace, str(batch)]
        procs = [subprocess.Popen(cmd, cwd=ROOT) for _ in range(2)]
    else:  # forked before the bar's thread starts
        pids = [run_child(lambda: bare_consume(url, keys, batch, shas)) for _ in range(2)]
    label = "launched" if launched else "bare"
    try:
        with polled_drain_bar(label, n, lambda: n - int(watch.hlen(keys.jobs))):
            if launched:
                codes = [p.wait(timeout=60 + n / 500) for p in procs]
                if any(codes):
                    raise BenchFailure(f"bare consumers exited with {codes}")
            else:
                for pid in pids:
                    wait_child(pid, "bare two-process drain")
            elapsed = time.perf_counter() - t0
    finally:
        watch.close()
    redis_cpu, evalsha = probe.delta()
    check_bare_drained(url, keys, "bare two-process drain")
    return {
        "jobs": n,
        "wall_s": elapsed,
        "jobs_s": n / elapsed,
        "redis_cpu_us_per_job": redis_cpu / n * 1e6,
        "redis_cores": redis_cpu / elapsed,
        "evalsha_per_100_jobs": evalsha / n * 100,
    }


# -- 2-4. pool drains (harness.pool_drain), and the smtp drain's sleep bound ------------


def sleep_bound(n: int) -> float:
    """Jobs/s of ``SMTP_CONCURRENCY`` forked processes doing nothing but the smtp
    job's ``time.sleep`` ``n`` times in all: what this machine's timers allow, which
    the 6,400 ideal (every sleep exactly 5 ms) does not account for."""
    per_child = -(-n // SMTP_CONCURRENCY)

    def sleeper() -> None:
        for _ in range(per_child):
            time.sleep(SMTP_JOB_S)

    t0 = time.perf_counter()
    pids = [run_child(sleeper) for _ in range(SMTP_CONCURRENCY)]
    for pid in pids:
        wait_child(pid, "sleep bound")
    return per_child * SMTP_CONCURRENCY / (time.perf_counter() - t0)


def smtp_drain(
    client: redis.Redis, url: str, n: int, batch: int, warm: bool = False
) -> dict[str, Any]:
    """``pool -c 32`` draining 5 ms jobs, beside the machine's sleep bound."""
    namespace = "smtpwarm" if warm else "smtp"
    result = pool_drain(
        client, url, namespace, pool_jobs.smtp, n, SMTP_CONCURRENCY, batch, warm=warm
    )
    result["sleep_bound_jobs_s"] = sleep_bound(n)
    return result


# -- 5. kill-to-claimable ----------------------------------------------------------------


def held_count(client: redis.Redis, keys: Any, worker_id: str) -> int:
    """Jobs a worker holds leases on (its held set, less the sentinel member)."""
    return max(int(client.scard(keys.held(worker_id))) - 1, 0)


def kill_to_claimable(client: redis.Redis, url: str, n: int) -> dict[str, Any]:
    """SIGKILL a busy worker child of ``pool -c 2``; time until every lease it held
    is gone, i.e. its jobs are back at the front of the queue (the release script
    drops the lease and pushes the id in one atomic call)."""
    namespace = "kill"
    app = fresh_app(client, url, namespace)
    job = pool_jobs.slow
    keys = app.keys(job.queue)
    job.enqueue_many([(i,) for i in range(n)])
    pool = Pool(url, namespace, job.queue, 2, KILL_BATCH)
    try:
        pool.start()
        workers = pool.workers()
        # the master names worker ids host:masterpid:wSLOT.SPAWNED and fills the
        # slots in order, so the oldest worker child is w0.1
        prefix = f"{socket.gethostname()}:{pool.pid}:"
        ids = [f"{prefix}w{slot}.{slot + 1}" for slot in range(len(workers))]
        victim, victim_id = workers[0], ids[0]
        deadline = time.monotonic() + 30
        while True:  # both workers busy, holding leases
            holding = [held_count(client, keys, i) for i in ids]
            if all(holding):
                break
            if time.monotonic() > deadline:
                raise BenchFailure(f"kill: workers {ids} never both held leases: {holding}")
            pool.check_alive("kill")
            time.sleep(0.005)
        time.sleep(0.2)  # well into the first batch: some jobs done (unacked), one running

        def snapshot() -> tuple[int, int]:
            pipe = client.pipeline(transaction=False)
            pipe.scard(keys.held(victim_id))
            pipe.hmget(keys.stats, "stalled", "orphaned")
            held, counters = pipe.execute()
            return max(held - 1, 0), sum(int(c or 0) for c in counters)  # less the sentinel

        held, base = snapshot()
        os.kill(victim.pid, signal.SIGKILL)
        t0 = time.perf_counter()
        grown_ms = None
        while True:
            still_held, handed_back = snapshot()
            now = time.perf_counter()
            if grown_ms is None and handed_back > base:
                grown_ms = (now - t0) * 1000
            if still_held == 0 and handed_back > base:
                break
            if now - t0 > 30:
                raise BenchFailure(
                    f"kill: {still_held} jobs of the killed worker still leased after 30s"
                )
            time.sleep(0.001)
        claimable_ms = (now - t0) * 1000
        moved = handed_back - base

        # then the pool drains the rest: the killed child's jobs run again
        deadline = time.monotonic() + 60 + n * SLOW_JOB_S
        with drain_bar("kill", n) as shown:
            while True:
                stats = app.stats(job.queue)
                done = stats["processed"]
                shown.update(done, stats["failed"], stats["total_dead"], final=done >= n)
                if done >= n:
                    break
                if time.monotonic() > deadline:
                    raise BenchFailure(f"kill: the pool did not finish the {n} jobs")
                pool.check_alive("kill")
                time.sleep(POLL_S)
        pool.stop("kill")
        log = pool.output()
    finally:
        pool.cleanup()
    stats = check_queue(app, job.queue, n, "kill", allow_redelivery=True)
    if f"worker {victim.pid} died" not in log:
        raise BenchFailure(f"kill: the master never logged the death of {victim.pid}:\n{log}")
    if moved < 1:
        raise BenchFailure("kill: the killed worker's jobs were not counted as stalled/orphaned")
    return {
        "jobs": n,
        "held_at_kill": held,
        "handed_back": moved,
        "stalled": stats["stalled"],
        "orphaned": stats["orphaned"],
        "first_handback_ms": grown_ms,
        "claimable_ms": claimable_ms,
    }


# -- 6. memory per child -----------------------------------------------------------------


def uss_mib(procs: list[psutil.Process]) -> list[float]:
    return [p.memory_full_info().uss / MIB for p in procs]


def memory_per_child(client: redis.Redis, url: str, total: int, batch: int) -> dict[str, Any]:
    """USS of each worker child of ``pool -c 2``: idle after start-up, after a first
    chunk (warm: every code path touched once), and after ``total`` jobs."""
    namespace = "memory"
    app = fresh_app(client, url, namespace)
    job = pool_jobs.noop
    chunk = min(100_000, max(1, total // 5))
    settle_s = 0.5  # let the children go idle before reading

    shown = drain_bar(namespace, total)

    def processed() -> int:
        stats = app.stats(job.queue)
        shown.update(stats["processed"], stats["failed"], stats["total_dead"])
        return stats["processed"]

    def wait_processed(count: int) -> None:
        deadline = time.monotonic() + 60 + count / 2000
        while processed() < count:
            if time.monotonic() > deadline:
                raise BenchFailure(f"memory: fewer than {count} jobs processed in time")
            pool.check_alive("memory")
            time.sleep(POLL_S)

    pool = Pool(url, namespace, job.queue, 2, batch)
    try:
        pool.start()
        workers = pool.workers()
        pids = sorted(p.pid for p in workers)
        time.sleep(1.0)  # start-up done: connected, idle on the wake-up key
        idle = uss_mib(workers)

        job.enqueue_many([(i,) for i in range(chunk)])
        wait_processed(chunk)
        time.sleep(settle_s)
        warm = uss_mib(workers)

        enqueued = chunk
        while enqueued < total:
            # keep at most two chunks queued: Redis holds 200k envelopes, not 1M
            if enqueued - processed() <= chunk:
                size = min(chunk, total - enqueued)
                job.enqueue_many([(i,) for i in range(enqueued, enqueued + size)])
                enqueued += size
            else:
                pool.check_alive("memory")
                time.sleep(POLL_S)
        wait_processed(total)
        shown.update(total, final=True)
        time.sleep(settle_s)
        after = uss_mib(workers)
        if sorted(p.pid for p in pool.workers()) != pids:
            raise BenchFailure("memory: a worker child was replaced during the run")
        pool.stop("memory")
    finally:
        shown.close()
        pool.cleanup()
    check_queue(app, job.queue, total, "memory")
    growth = [a - i for a, i in zip(after, idle)]
    growth_warm = [a - w for a, w in zip(after, warm)]
    return {
        "jobs": total,
        "chunk": chunk,
        "idle_mib": idle,
        "warm_mib": warm,
        "after_mib": after,
        "growth_mib": growth,
        "growth_after_warm_mib": growth_warm,
        "max_growth_mib": max(growth),
        "max_growth_after_warm_mib": max(growth_warm),
    }


# -- the run -----------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--jobs", type=int, help="no-op jobs per drain (default 200000)")
    p.add_argument("--batch", type=int, default=100, help="jobs per claim (default 100)")
    p.add_argument("--smtp-jobs", type=int, help="5 ms jobs of the smtp scenario (default 20000)")
    p.add_argument("--kill-jobs", type=int, help="50 ms jobs of the kill scenario (default 200)")
    p.add_argument(
        "--memory-jobs", type=int, help="no-op jobs of the memory scenario (default 1000000)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the drain scenarios (bare to smtp) this many times, "
        "interleaved, "
        "and report each one's median run (default 1)",
    )
    add_json_option(p)
    p.add_argument(
        "--metrics", action="store_true", help="pools serve Prometheus metrics (--metrics-port)"
    )
    p.add_argument(
        "--no-records",
        action="store_const",
        const=0,
        dest="records_max_len",
        help="the pools' queues keep no records of ended jobs (records_max_len 0)",
    )
    p.add_argument(
        "--records-max-len",
        type=int,
        help="the pools' queues' records_max_len (default: fastq's default)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: 20,000 jobs, 2,000 smtp, 100 kill, 50,000 memory jobs",
    )
    p.add_argument(
        "--only", metavar="NAME[,NAME]", help=f"run only these scenarios: {','.join(SCENARIOS)}"
    )
    add_progress_option(p)
    args = p.parse_args(argv)
    q = args.quick
    if args.jobs is None:
        args.jobs = 20_000 if q else 200_000
    if args.smtp_jobs is None:
        args.smtp_jobs = 2_000 if q else 20_000
    if args.kill_jobs is None:
        args.kill_jobs = 100 if q else 200
    if args.memory_jobs is None:
        args.memory_jobs = 50_000 if q else 1_000_000
    if min(args.jobs, args.smtp_jobs, args.kill_jobs, args.memory_jobs) < 1:
        p.error("job counts must be positive")
    if args.kill_jobs < 40:
        p.error("--kill-jobs must be at least 40: both children must be busy at the kill")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if not 1 <= args.batch <= 1000:
        p.error("--batch must be within 1..1000")
    only = SCENARIOS if args.only is None else [s.strip() for s in args.only.split(",")]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown or not only:
        p.error(f"unknown scenario(s) {unknown}: choose from {','.join(SCENARIOS)}")
    args.scenarios = [s for s in SCENARIOS if s in only]
    POOL_OPTIONS["metrics"] = args.metrics
    POOL_OPTIONS["records_max_len"] = args.records_max_len
    configure_progress(args.progress)
    return args


def _fmt(value: Optional[float], spec: str = ",.0f", none: str = "—") -> str:
    return none if value is None else format(value, spec)


def print_drain(label: str, r: dict[str, Any]) -> None:
    extra = ""
    if "first_to_last_s" in r:
        extra = f", first→last {r['first_to_last_s']:.2f} s"
    if "sleep_bound_jobs_s" in r:
        extra += f"; {SMTP_CONCURRENCY} bare sleepers: {r['sleep_bound_jobs_s']:,.0f} jobs/s"
    print(
        f"  {label}: {r['jobs']:,} jobs in {r['wall_s']:.2f} s = {r['jobs_s']:,.0f} jobs/s{extra}"
    )
    cpu = f"pool {r['pool_cpu_us_per_job']:.1f} µs/job, " if "pool_cpu_us_per_job" in r else ""
    print(
        f"    CPU: {cpu}Redis {r['redis_cpu_us_per_job']:.1f} µs/job"
        f" ({r['redis_cores']:.0%} of a core); {r['evalsha_per_100_jobs']:.2f} EVALSHA/100 jobs"
    )


def timed(scenario: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run a scenario; note how long it took, set-up and checks included."""
    t0 = time.perf_counter()
    result = scenario(*args)
    result["scenario_s"] = time.perf_counter() - t0
    return result


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, batch = args.jobs, args.batch
    results: dict[str, dict[str, Any]] = {}
    server = RedisServer().start()
    started = time.perf_counter()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq pool benchmark",
            f"{n:,} no-op jobs, batch {batch}, scenarios {','.join(args.scenarios)}; "
            f"throwaway redis-server at {server.url}",
        )
        # fastq's scripts are loaded as a long-lived producer has them
        scripts.load_all(client)
        noop = pool_jobs.noop

        drains: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
            "bare": (
                "bare, 2 processes forked",
                lambda: bare_two(client, server.url, n, batch, launched=False),
            ),
            "launched": (
                "bare, 2 processes launched",
                lambda: bare_two(client, server.url, n, batch, launched=True),
            ),
            "c2": ("pool -c 2", lambda: pool_drain(client, server.url, "c2", noop, n, 2, batch)),
            "c32": (
                "pool -c 32",
                lambda: pool_drain(client, server.url, "c32", noop, n, 32, batch),
            ),
            "c2warm": (
                "pool -c 2, warm",
                lambda: pool_drain(client, server.url, "c2warm", noop, n, 2, batch, warm=True),
            ),
            "c32warm": (
                "pool -c 32, warm",
                lambda: pool_drain(client, server.url, "c32warm", noop, n, 32, batch, warm=True),
            ),
            "smtp": (
                "pool -c 32, 5 ms jobs",
                lambda: smtp_drain(client, server.url, args.smtp_jobs, batch),
            ),
            "smtpwarm": (
                "pool -c 32, 5 ms jobs, warm",
                lambda: smtp_drain(client, server.url, args.smtp_jobs, batch, warm=True),
            ),
        }
        runs: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(args.repeat):  # interleaved, so drift hits every scenario alike
            for name, (label, scenario) in drains.items():
                if name in args.scenarios:
                    runs.setdefault(name, []).append(r := timed(scenario))
                    print_drain(label + (f" (run {round_ + 1})" if args.repeat > 1 else ""), r)
        for name, these in runs.items():
            # the median run by throughput; its other figures come with it
            results[name] = sorted(these, key=lambda r: r["jobs_s"])[len(these) // 2]
            results[name]["runs_jobs_s"] = [r["jobs_s"] for r in these]
        if "kill" in args.scenarios:
            results["kill"] = r = timed(kill_to_claimable, client, server.url, args.kill_jobs)
            print(
                f"  kill: {_jobs(r['held_at_kill'])} leased at SIGKILL, {r['handed_back']} handed"
                f" back (first after {_fmt(r['first_handback_ms'], '.1f')} ms, all after"
                f" {r['claimable_ms']:.1f} ms); totals stalled {r['stalled']},"
                f" orphaned {r['orphaned']}"
            )
        if "memory" in args.scenarios:
            results["memory"] = r = timed(
                memory_per_child, client, server.url, args.memory_jobs, batch
            )
            print(
                f"  memory: USS per worker child, MiB: idle {_mibs(r['idle_mib'])}, after"
                f" {r['chunk']:,} jobs {_mibs(r['warm_mib'])}, after {r['jobs']:,} jobs"
                f" {_mibs(r['after_mib'])}"
            )
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        pool_jobs.app.close()
        server.cleanup()
    run_s = time.perf_counter() - started

    targets = report_table(results)
    print(f"\n(run took {run_s:.1f} s)")
    report: dict[str, Any] = {
        "machine": machine,
        "source": source,
        "options": {
            "jobs": n,
            "batch": batch,
            "smtp_jobs": args.smtp_jobs,
            "kill_jobs": args.kill_jobs,
            "memory_jobs": args.memory_jobs,
            "scenarios": args.scenarios,
            "quick": args.quick,
        },
        "scenarios": results,
        "targets": targets,
        "run_s": run_s,
    }
    write_report(report, "e2e_pool", args.json)
    return 0


def _jobs(n: int) -> str:
    return f"{n:,} job" if n == 1 else f"{n:,} jobs"


def _mibs(values: list[float], spec: str = ".1f") -> str:
    return " / ".join(format(v, spec) for v in values)


def report_table(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Print the table and the targets; return the targets for the JSON report."""
    bare, launched = results.get("bare"), results.get("launched")
    print()
    print(f"{'':<24}{'jobs/s':>10}{'first→last/s':>14}{'start-up s':>12}  ratio (first→last)")
    for r, label in ((bare, "bare, 2 forked"), (launched, "bare, 2 launched")):
        if r:
            print(f"{label:<24}{r['jobs_s']:>10,.0f}{'—':>14}{'—':>12}")
    ideal = {"jobs_s": SMTP_IDEAL, "steady_jobs_s": SMTP_IDEAL}

    def smtp_bases(key: str) -> list[tuple[Optional[dict[str, Any]], str]]:
        bases: list[tuple[Optional[dict[str, Any]], str]] = [(ideal, f"of {SMTP_IDEAL:,.0f}")]
        if results.get(key):
            bound = results[key]["sleep_bound_jobs_s"]
            sleepers = {"jobs_s": bound, "steady_jobs_s": bound}
            bases.append((sleepers, f"of {SMTP_CONCURRENCY} bare sleepers"))
        return bases

    rows = (
        ("c2", "pool -c 2", [(bare, "of bare forked"), (launched, "of bare launched")]),
        ("c32", "pool -c 32", [(results.get("c2"), "of -c 2")]),
        ("c2warm", "pool -c 2, warm", []),
        ("c32warm", "pool -c 32, warm", [(results.get("c2warm"), "of -c 2 warm")]),
        ("smtp", "pool -c 32, 5 ms jobs", smtp_bases("smtp")),
        ("smtpwarm", "-c 32, 5 ms jobs, warm", smtp_bases("smtpwarm")),
    )
    for key, label, bases in rows:
        r = results.get(key)
        if not r:
            continue
        ratios = []
        for base, word in bases:
            if base:
                text = f"{r['jobs_s'] / base['jobs_s']:.2f} {word}"
                steady_base = base.get("steady_jobs_s") or base["jobs_s"]
                if r["steady_jobs_s"] and base is not launched:  # both without start-up
                    text += f" ({r['steady_jobs_s'] / steady_base:.2f})"
                ratios.append(text)
        print(
            f"{label:<24}{r['jobs_s']:>10,.0f}{_fmt(r['steady_jobs_s']):>14}"
            f"{r['first_seen_s']:>12.2f}  {', '.join(ratios)}"
        )
    kill = results.get("kill")
    if kill:
        print(
            f"kill-to-claimable: {kill['claimable_ms']:.0f} ms"
            f" ({_jobs(kill['held_at_kill'])} leased by the killed child,"
            f" {kill['handed_back']} handed back)"
        )
    mem = results.get("memory")
    if mem:
        print(
            f"USS per worker child: idle {_mibs(mem['idle_mib'])} MiB, after"
            f" {mem['jobs']:,} jobs {_mibs(mem['after_mib'])} MiB"
            f" (growth {_mibs(mem['growth_mib'], '+.1f')};"
            f" after the first {mem['chunk']:,}: {_mibs(mem['growth_after_warm_mib'], '+.1f')})"
        )
    print()
    print("targets (informational; the exit status does not depend on them):")
    targets: dict[str, Any] = {}

    def line(name: str, text: str, value: Optional[float], shown: str, ok: Optional[bool]) -> None:
        verdict = "n/a (not run)" if ok is None else ("PASS" if ok else "BELOW")
        print(f"  {text:<44}{shown:>10}  {verdict}")
        targets[name] = {"value": value, "pass": ok}

    def jobs_s(r: Optional[dict[str, Any]]) -> Optional[float]:
        return r["jobs_s"] if r else None

    c2 = results.get("c2")
    of_bare = f"-c 2 drain >= {TARGET_C2:.0%} of bare 2"
    within = f"-c 32 drain within {1 - TARGET_C32:.0%} of -c 2"
    smtp_text = f"5 ms jobs >= {TARGET_SMTP:.0%} of {SMTP_IDEAL:,.0f} jobs/s"
    ratios = (  # key, text, scenario, its reference in jobs/s, target
        ("c2_vs_bare", f"{of_bare} forked", c2, jobs_s(bare), TARGET_C2),
        ("c2_vs_bare_launched", f"{of_bare} launched", c2, jobs_s(launched), TARGET_C2),
        ("c32_vs_c2", f"{within}, cold", results.get("c32"), jobs_s(c2), TARGET_C32),
        (
            "c32_vs_c2_warm",
            f"{within}, warm",
            results.get("c32warm"),
            jobs_s(results.get("c2warm")),
            TARGET_C32,
        ),
        ("smtp_vs_ideal", f"{smtp_text}, cold", results.get("smtp"), SMTP_IDEAL, TARGET_SMTP),
        (
            "smtp_vs_ideal_warm",
            f"{smtp_text}, warm",
            results.get("smtpwarm"),
            SMTP_IDEAL,
            TARGET_SMTP,
        ),
    )
    for key, text, r, reference, target in ratios:
        if r:
            ratio = r["jobs_s"] / reference if reference else None
            ok = None if ratio is None else ratio >= target
            line(key, text, ratio, _fmt(ratio, ".1%", ""), ok)
    if kill:
        ms = kill["claimable_ms"]
        line(
            "kill_ms",
            f"kill-to-claimable < {TARGET_KILL_MS / 1000:g} s",
            ms,
            f"{ms:.0f} ms",
            ms < TARGET_KILL_MS,
        )
    if mem:
        growth = mem["max_growth_mib"]
        line(
            "uss_growth_mib",
            f"no USS growth over {mem['jobs']:,} jobs (< {MEMORY_NOISE_MIB:g} MiB)",
            growth,
            f"{growth:+.1f} MiB",
            growth < MEMORY_NOISE_MIB,
        )
    return targets


if __name__ == "__main__":
    sys.exit(main())
