"""Several queues: what a worker on ``-q a,b,c,d`` pays when its work sits in a
later queue, and in which order it serves queues that all have work.

Everything runs against one throwaway ``redis-server`` this script starts itself
(never the Redis on port 6379). Each worker is a real subprocess,
``python -m fastq worker --burst --app bench.jobs.pool -q ...`` with
``FASTQ_REDIS_URL`` set; it must exit 0 with every job processed once.

1. one     N no-op jobs in ``d``, a worker on ``-q d``
2. last    the same N jobs in ``d``, a worker on ``-q a,b,c,d`` (a, b, c empty);
           the ratio last / one is the target (>= 0.9)
3. spread  N/4 jobs in each of a, b, c, d, a worker on ``-q a,b,c,d``: when each
           queue's first and last job were seen processed (stats polled every
           few ms), and how many jobs of later queues ran before a queue was done
           (strict priority in ``-q`` order: none, bar the batches already claimed)

    python -m bench.many_queues                # 200,000 jobs, median of 3 runs
    python -m bench.many_queues --quick        # 20,000 jobs, once
    python -m bench.many_queues --json out.json
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
    child_env,
    configure_progress,
    drain_bar,
    fresh_app,
    write_report,
)
from bench.jobs import pool as pool_jobs
from fastq.protocol import scripts
from fastq.protocol.contracts import CLAIM
from fastq.protocol.keys import QueueKeys
from fastq.testing.redis_server import RedisServer

QUEUES = ("a", "b", "c", "d")
POLL_S = 0.005
TARGET_LAST = 0.9  # work in the last of four queues drains at >= 90% of one queue
LOOKS = 20_000  # looks at an empty queue, for their Redis CPU time


def worker_cmd(queues: str, batch: int) -> list[str]:
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
        queues,
        "--batch",
        str(batch),
    ]


def drain(
    client: redis.Redis, url: str, namespace: str, spec: dict[str, int], queues: str, batch: int
) -> dict[str, Any]:
    """Queue ``spec[q]`` no-op jobs in each queue q, run one burst worker on
    ``queues``, and poll every queue's processed count until the worker exits."""
    app = fresh_app(client, url, namespace)
    app.declare_queue(*spec)  # the benchmark's queues a, b, c, d: no job is registered there
    for q, n in spec.items():
        pool_jobs.noop.enqueue_many([(i,) for i in range(n)], queue=q)
    total = sum(spec.values())
    env = child_env(url)
    cmd = [*worker_cmd(queues, batch), "--namespace", namespace]
    probe = Probe(client)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    overtaken: dict[str, int] = {}  # jobs of later queues processed when q was done
    with tempfile.TemporaryFile(prefix="fastq-bench-queues-") as log:
        # opened before the clock starts, fed by the poll the timing needs anyway (the
        # queues' counts summed); closed once the clock has stopped
        with drain_bar(f"{namespace} -q {queues}", total) as shown:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            deadline = t0 + 60 + total / 2000
            pipe = client.pipeline(transaction=False)
            while True:
                for q in spec:
                    pipe.hget(app.keys(q).stats, "processed")
                counts = [int(c or 0) for c in pipe.execute()]
                now = time.perf_counter()
                for i, (q, done) in enumerate(zip(spec, counts)):
                    if done and q not in first:
                        first[q] = now
                    if done >= spec[q] and q not in last:
                        last[q] = now
                        overtaken[q] = sum(counts[i + 1 :])
                ended = len(last) == len(spec) or proc.poll() is not None
                shown.update(sum(counts), final=ended)
                if ended:
                    break
                if now > deadline:
                    proc.kill()
                    raise BenchFailure(
                        f"{namespace}: {counts} of {spec} processed after the deadline"
                    )
                time.sleep(POLL_S)
            # the worker's own CPU time, from the kernel's accounting of the child
            _, status, usage = os.wait4(proc.pid, 0)
            exited = time.perf_counter()  # before the bar's close draws its last frame
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read().decode(errors="replace")
    if code != 0:
        raise BenchFailure(f"{namespace}: the worker exited {code}:\n{output[-3000:]}")
    redis_cpu, evalsha = probe.delta()
    for q, n in spec.items():
        check_queue(app, q, n, f"{namespace} queue {q}")
        last.setdefault(q, exited)  # done between the last poll and the exit
        first.setdefault(q, exited)
        overtaken.setdefault(q, 0)
    start = min(first.values())
    window = max(last.values()) - start
    return {
        "jobs": total,
        "queues": queues,
        "wall_s": exited - t0,  # Popen to exit: interpreter start and import included
        "jobs_s": total / (exited - t0),
        "first_to_last_s": window,
        "steady_jobs_s": total / window if window > 0 else None,
        "redis_cpu_us_per_job": redis_cpu / total * 1e6,
        "worker_cpu_us_per_job": (usage.ru_utime + usage.ru_stime) / total * 1e6,
        "evalsha_per_100_jobs": evalsha / total * 100,
        "served": {
            q: {
                "first_s": first[q] - start,
                "last_s": last[q] - start,
                "later_jobs_done_when_finished": overtaken[q],
            }
            for q in spec
        },
    }


def redis_cpu_us(client: redis.Redis, commands: list[tuple[Any, ...]]) -> float:
    """Redis' CPU time (``INFO cpu``: reading, parsing, running and replying) per
    run of ``commands``, sent pipelined ``LOOKS`` times."""
    pipe = client.pipeline(transaction=False)
    probe = Probe(client)
    for i in range(LOOKS):
        for command in commands:
            pipe.execute_command(*command)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    return probe.delta()[0] / LOOKS * 1e6


def look_costs(client: redis.Redis) -> dict[str, float]:
    """What a look at one empty earlier queue costs Redis per batch: a claim call
    (the worker before its peek), and the peek's three plain reads (the TIME that
    starts a peek is shared by its queues and left out)."""
    k = QueueKeys("emptyclaim", "a")
    keys = CLAIM.keys_for(k, "bench-worker")
    claim = tuple(CLAIM.script.args(keys, CLAIM.argv("bench-worker", 100, 60_000, 250)))
    peek = [
        ("EXISTS", k.ready, k.prio),
        ("ZRANGE", k.scheduled, 0, 0, "WITHSCORES"),
        ("HGET", k.settings, "paused"),
    ]
    return {"claim_us": redis_cpu_us(client, [claim]), "peek_us": redis_cpu_us(client, peek)}


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of one/last; the median")
    parser.add_argument("--quick", action="store_true", help="20,000 jobs, one run")
    add_json_option(parser)
    add_progress_option(parser)
    args = parser.parse_args(argv)
    configure_progress(args.progress)
    if args.quick:
        args.jobs = min(args.jobs, 20_000)
        args.repeat = 1
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    n, batch = args.jobs, args.batch
    server = RedisServer().start()
    results: dict[str, Any] = {}
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "fastq many-queues benchmark",
            f"{n:,} no-op jobs, batch {batch}; throwaway redis-server at {server.url}",
        )
        scripts.load_all(client)
        runs: dict[str, list[dict[str, Any]]] = {"one": [], "last": []}
        for round_ in range(args.repeat):  # interleaved, so drift hits both alike
            for name, queues in (("one", "d"), ("last", ",".join(QUEUES))):
                r = drain(client, server.url, name, {"d": n}, queues, batch)
                runs[name].append(r)
                print(
                    f"  -q {queues:<8} (run {round_ + 1}): {n:,} jobs in d, "
                    f"{r['jobs_s']:,.0f} jobs/s Popen→exit, first→last "
                    f"{r['steady_jobs_s'] or 0:,.0f} jobs/s; Redis "
                    f"{r['redis_cpu_us_per_job']:.2f} µs/job, worker "
                    f"{r['worker_cpu_us_per_job']:.2f} µs/job (start-up included), "
                    f"{r['evalsha_per_100_jobs']:.2f} EVALSHA/100 jobs"
                )
        results["rounds"] = [
            {"one": one["jobs_s"], "last": last["jobs_s"]}
            for one, last in zip(runs["one"], runs["last"])
        ]
        for name, these in runs.items():
            results[name] = sorted(these, key=lambda r: r["jobs_s"])[len(these) // 2]
            results[name]["runs_jobs_s"] = [r["jobs_s"] for r in these]
        per_queue = n // len(QUEUES)
        spec = {q: per_queue for q in QUEUES}
        results["spread"] = r = drain(client, server.url, "spread", spec, ",".join(QUEUES), batch)
        results["look"] = look_costs(client)
        client.close()
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        pool_jobs.app.close()
        server.cleanup()

    one, last, spread = results["one"], results["last"], results["spread"]
    ratio = last["jobs_s"] / one["jobs_s"]
    steady = (
        last["steady_jobs_s"] / one["steady_jobs_s"]
        if last["steady_jobs_s"] and one["steady_jobs_s"]
        else None
    )
    print()
    print(
        f"{'':<28}{'jobs/s':>10}{'first→last/s':>14}{'Redis µs/job':>14}"
        f"{'worker µs/job':>15}{'EVALSHA/100':>13}"
    )
    for label, r in (("-q d, work in d", one), ("-q a,b,c,d, work in d", last)):
        print(
            f"{label:<28}{r['jobs_s']:>10,.0f}{r['steady_jobs_s'] or 0:>14,.0f}"
            f"{r['redis_cpu_us_per_job']:>14.2f}{r['worker_cpu_us_per_job']:>15.2f}"
            f"{r['evalsha_per_100_jobs']:>13.2f}"
        )
    steady_text = f" (first→last {steady:.2f})" if steady else ""
    # each round's pair ran back to back and shared the box's load: the median of
    # their ratios moves less than the ratio of the medians
    per_round = sorted(r["last"] / r["one"] for r in results["rounds"])
    paired = per_round[len(per_round) // 2]
    rounds_text = ", ".join(f"{x:.2f}" for x in per_round)
    print(f"ratio -q a,b,c,d / -q d: {ratio:.2f}{steady_text}")
    print(f"  median of the rounds' ratios: {paired:.2f} (each round: {rounds_text})")
    # CPU per job (worker + Redis) moves far less with the box's load than jobs/s
    cpu_ratio = (one["worker_cpu_us_per_job"] + one["redis_cpu_us_per_job"]) / (
        last["worker_cpu_us_per_job"] + last["redis_cpu_us_per_job"]
    )
    print(f"CPU per job (worker + Redis), -q d / -q a,b,c,d: {cpu_ratio:.2f}")
    earlier = len(QUEUES) - 1
    look = results["look"]
    print(
        f"Redis CPU of a look at an empty earlier queue: a peek {look['peek_us']:.2f} µs, "
        f"a claim call {look['claim_us']:.2f} µs; for {earlier} queues at full batches of "
        f"{batch}: {look['peek_us'] * earlier / batch:.3f} against "
        f"{look['claim_us'] * earlier / batch:.3f} µs/job"
    )
    print(
        f"\nwork spread over {','.join(QUEUES)} ({per_queue:,} each), -q {','.join(QUEUES)}: "
        f"{spread['jobs_s']:,.0f} jobs/s"
    )
    print(f"  {'queue':<6}{'first seen s':>14}{'done s':>10}{'later jobs done by then':>26}")
    for q, s in spread["served"].items():
        print(
            f"  {q:<6}{s['first_s']:>14.3f}{s['last_s']:>10.3f}"
            f"{s['later_jobs_done_when_finished']:>26,}"
        )
    order = sorted(spread["served"], key=lambda q: spread["served"][q]["last_s"])
    print(f"  served (by the time each queue was done): {','.join(order)}")
    in_order = order == list(QUEUES)
    print()
    print("targets (informational; the exit status does not depend on them):")
    verdict = "PASS" if ratio >= TARGET_LAST else "BELOW"
    print(
        f"  work in the last of 4 queues >= {TARGET_LAST:.0%} of one queue {ratio:>8.1%}  {verdict}"
    )
    print(
        f"  spread work served in -q order (strict priority)        {'PASS' if in_order else 'NO'}"
    )
    targets = {
        "last_vs_one": {
            "value": ratio,
            "paired": paired,
            "steady": steady,
            "cpu": cpu_ratio,
            "pass": ratio >= TARGET_LAST,
        },
        "served_in_order": {"value": order, "pass": in_order},
    }
    report = {
        "machine": machine,
        "source": source,
        "options": {"jobs": n, "batch": batch, "repeat": args.repeat, "quick": args.quick},
        "scenarios": results,
        "targets": targets,
    }
    write_report(report, "many_queues", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
