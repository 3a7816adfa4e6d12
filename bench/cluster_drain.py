"""Drains on a Redis Cluster against a single Redis, in one run (issue 15).

Each scenario is a real ``python -m fastq pool -c 2`` (``harness.Pool``) draining N
no-op jobs queued beforehand, timed from the first job processed to the last:

    single    one redis-server, one queue
    cluster1  a 3-master cluster (throwaway, on free loopback ports), one queue: one
              master does all the work
    cluster3  the same cluster, the N jobs spread over 3 queues, one on each master
              (``-q a,b,c``): the round trip fans out to three nodes
    sharded3  the same cluster, one queue of 3 shards, one on each master (``-q m``):
              one hot queue over three nodes

Redis CPU is summed over the nodes (``INFO cpu``), and EVALSHA calls (claims, acks)
counted per node, so the figures say where the time goes: client side (the pool's
CPU per job) or Redis side (per node). On a 2-core machine the three masters and
the pool share the cores: the ratios show what the design costs, not how it scales
with real nodes (bench/results/cluster_drain-2026-11-24.md estimates that on paper).

    python -m bench.cluster_drain                 # 100,000 jobs a drain
    python -m bench.cluster_drain --quick         # 5,000 (the smoke test: 2,000)
    python -m bench.cluster_drain -n 50000 --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Optional

import redis

from bench.harness import (
    POLL_S,
    BenchFailure,
    Pool,
    add_json_option,
    add_progress_option,
    announce,
    configure_progress,
    drain_bar,
    master_of,
    queues_on_masters,
    write_report,
)
from bench.jobs import pool as pool_jobs
from fastq.protocol.keys import shard_names
from fastq.testing.cluster_server import ClusterServer
from fastq.testing.redis_server import RedisServer

CHILDREN = 2
BATCH = 100


def node_clients(cluster: Optional[ClusterServer], single: Optional[RedisServer]) -> list[Any]:
    if cluster is not None:
        return [cluster.client(port) for port in cluster.ports]
    assert single is not None
    return [redis.Redis.from_url(single.url)]


def node_figures(clients: list[Any]) -> list[tuple[float, int]]:
    """(CPU seconds, EVALSHA calls) of each node."""
    out = []
    for c in clients:
        cpu = c.info("cpu")
        calls = c.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        out.append((float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), int(calls)))
    return out


def sharded_on_masters(cluster: ClusterServer, k: int) -> str:
    """A queue name whose ``k`` shards are each on a different master."""
    master = master_of(cluster)
    i = 0
    while len({master(name) for name in shard_names(f"m{i}", k)}) < k:
        i += 1
    return f"m{i}"


def drain(
    url: str, namespace: str, queues: list[str], n: int, clients: list[Any], shards: int = 1
) -> dict[str, Any]:
    app = pool_jobs.app
    app.configure(redis_url=url, namespace=namespace)
    app.declare_queue(*queues, shards=shards if shards > 1 else None)
    per_queue = [n // len(queues) + (1 if i < n % len(queues) else 0) for i in range(len(queues))]
    start = 0
    for queue, m in zip(queues, per_queue):
        pool_jobs.noop.enqueue_many([(i,) for i in range(start, start + m)], queue=queue)
        start += m
    pool = Pool(url, namespace, ",".join(queues), CHILDREN, BATCH)
    timeout_s = 60 + n / 500
    try:
        pool.start()
        before = node_figures(clients)
        cpu0 = 0.0
        with drain_bar(namespace, n) as shown:
            t0 = time.perf_counter()
            first_t, first_done = 0.0, 0
            while True:
                stats = [app.stats(q) for q in queues]
                done = sum(s["processed"] for s in stats)
                now = time.perf_counter()
                shown.update(done, sum(s["failed"] for s in stats), 0, final=done >= n)
                if done and not first_t:
                    first_t, first_done, cpu0 = now, done, pool.cpu_s()
                if done >= n:
                    break
                if now - t0 > timeout_s:
                    raise BenchFailure(f"{namespace}: {done} of {n} processed after {timeout_s}s")
                pool.check_alive(namespace)
                time.sleep(POLL_S)
            pool_cpu = pool.cpu_s() - cpu0
        after = node_figures(clients)
        pool.stop(namespace)
    finally:
        pool.cleanup()
    for queue, m in zip(queues, per_queue):
        s = app.stats(queue)
        if (s["processed"], s["ready"], s["inflight"], s["failed"]) != (m, 0, 0, 0):
            raise BenchFailure(f"{namespace}: queue {queue} expected {m} processed: {s}")
    window = now - first_t
    if first_done >= n or window <= 0:
        window, first_done = now - t0, 0
    jobs = n - first_done
    redis_cpu = [a[0] - b[0] for a, b in zip(after, before)]
    calls = [a[1] - b[1] for a, b in zip(after, before)]
    return {
        "jobs": n,
        "queues": queues,
        "jobs_s": jobs / window,
        "pool_cpu_us_per_job": pool_cpu / jobs * 1e6,
        "redis_cpu_us_per_job": sum(redis_cpu) / n * 1e6,
        "redis_cpu_us_per_job_per_node": [round(c / n * 1e6, 2) for c in redis_cpu],
        "evalsha_per_node": calls,
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("-n", "--jobs", type=int, default=100_000)
    p.add_argument("--quick", action="store_true", help="5,000 jobs a drain")
    p.add_argument("--repeat", type=int, default=1, help="runs of each scenario (median shown)")
    add_json_option(p)
    add_progress_option(p)
    args = p.parse_args(argv)
    configure_progress(args.progress)
    n = 5_000 if args.quick and args.jobs == 100_000 else args.jobs
    results: dict[str, list[dict[str, Any]]] = {
        "single": [],
        "cluster1": [],
        "cluster3": [],
        "sharded3": [],
    }
    try:
        with RedisServer() as single, ClusterServer(masters=3) as cluster:
            single_clients = node_clients(None, single)
            cluster_clients = node_clients(cluster, None)
            three = list(queues_on_masters(cluster, 3).values())
            hot = sharded_on_masters(cluster, 3)
            machine, source = announce(
                single_clients[0],
                "fastq cluster benchmark",
                f"{n:,} no-op jobs a drain, pool -c {CHILDREN}, {args.repeat} run(s) of each "
                "scenario; a throwaway redis-server and a throwaway 3-master cluster",
            )
            sys.stdout.flush()
            for r in range(args.repeat):
                results["single"].append(
                    drain(single.url, f"single{r}", ["noop"], n, single_clients)
                )
                results["cluster1"].append(
                    drain(cluster.url, f"cluster1-{r}", three[:1], n, cluster_clients)
                )
                results["cluster3"].append(
                    drain(cluster.url, f"cluster3-{r}", three, n, cluster_clients)
                )
                results["sharded3"].append(
                    drain(cluster.url, f"sharded3-{r}", [hot], n, cluster_clients, shards=3)
                )
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    medians = {name: statistics.median(r["jobs_s"] for r in runs) for name, runs in results.items()}
    print(f"\n{n:,} no-op jobs a drain, fastq pool -c {CHILDREN}, median of {args.repeat}")
    print(f"{'scenario':10} {'jobs/s':>10} {'pool µs/job':>12} {'Redis µs/job':>13}  per node")
    for name, runs in results.items():
        last = runs[-1]
        print(
            f"{name:10} {medians[name]:>10,.0f} {last['pool_cpu_us_per_job']:>12.2f} "
            f"{last['redis_cpu_us_per_job']:>13.2f}  {last['redis_cpu_us_per_job_per_node']}"
        )
    print(
        f"cluster1/single {medians['cluster1'] / medians['single']:.2f}  "
        f"cluster3/single {medians['cluster3'] / medians['single']:.2f}  "
        f"cluster3/cluster1 {medians['cluster3'] / medians['cluster1']:.2f}  "
        f"sharded3/cluster1 {medians['sharded3'] / medians['cluster1']:.2f}"
    )
    report = {"machine": machine, "source": source, "jobs": n, "results": results}
    write_report(report, "cluster_drain", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
