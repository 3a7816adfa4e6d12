"""Connections an idle ``fastq pool`` holds on each master of a 3-master cluster.

A cluster worker idles on one blocking connection per slot of its queues (a
``BLPOP``'s keys must share a slot: a sharded queue's K shards are K slots), plus a
round-trip connection per master and its cluster client's. This counts them: a
throwaway cluster, a pool of ``-c C`` serving ``mailer`` (4 shards, from
``bench.jobs.sharded``) and then ``mailer,default``, idle, and ``CLIENT LIST``
on every master (less the connections there before the pool).

    python -m bench.cluster_connections            # -c 4 and -c 8
    python -m bench.cluster_connections -c 32
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.harness import ROOT, add_json_option, child_env, write_report
from fastq.testing.cluster_server import ClusterServer


def connections(cluster: ClusterServer) -> list[int]:
    out = []
    for port in cluster.ports:
        client = cluster.client(port)
        try:
            out.append(len(client.client_list()) - 1)  # not this one
        finally:
            client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--concurrency", type=int, action="append", help="children")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds idle first")
    add_json_option(parser)
    args = parser.parse_args()
    rows = []
    with ClusterServer(3) as cluster:
        before = connections(cluster)
        env = child_env(cluster.url)
        for c in args.concurrency or [4, 8]:
            for queues in ("mailer", "mailer,default"):
                cmd = [
                    sys.executable,
                    "-m",
                    "fastq",
                    "--log-level",
                    "ERROR",
                    "pool",
                    "-c",
                    str(c),
                    "--app",
                    "bench.jobs.sharded",
                    "-q",
                    queues,
                ]
                pool = subprocess.Popen(cmd, env=env, cwd=ROOT)
                try:
                    time.sleep(args.settle)
                    held = [n - b for n, b in zip(connections(cluster), before)]
                finally:
                    pool.terminate()
                    pool.wait(60)
                time.sleep(1.0)  # the pool's connections close
                print(f"-c {c} -q {queues}: connections on each master {held}", flush=True)
                rows.append({"concurrency": c, "queues": queues, "connections_per_master": held})
    write_report({"settle_s": args.settle, "pools": rows}, "cluster_connections", args.json)


if __name__ == "__main__":
    main()
