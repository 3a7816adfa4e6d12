"""How often the reaper sweeps the healthy masters' queues while one master is silent.

A throwaway 3-master cluster (a long node timeout, so nothing fails over), a queue
on each master, a reaper sweeping every 1 s at most with the silent master's queue
first; that master is SIGSTOPped for ``--stop`` seconds. Printed: how many times a
healthy queue was swept meanwhile, the longest gap between its sweeps, and how soon
after the stop the first came.

    python -m bench.cluster_silent_master              # a 20 s stop
    python -m bench.cluster_silent_master --stop 45
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from typing import Any

import fastq
from bench.harness import add_json_option, master_of, queues_on_masters, write_report
from fastq.protocol.shards import shards_key
from fastq.reaper import reaper as reaper_module
from fastq.testing.cluster_server import ClusterServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop", type=float, default=20.0, help="seconds the master is stopped")
    add_json_option(parser)
    args = parser.parse_args()
    with ClusterServer(3, node_timeout_ms=60_000) as cluster:
        namespace = "silent"
        owners = queues_on_masters(cluster, cluster.masters, "m")
        # not the master of the namespace's own keys: the reaper reads its queue list there
        keeper = master_of(cluster)(shards_key(namespace))
        victim_port = next(p for p in sorted(owners) if p != keeper)
        victim = next(node for node in cluster.nodes if node.port == victim_port)
        healthy = [q for p, q in owners.items() if p != victim_port]
        app = fastq.App(cluster.url, namespace=namespace)
        for queue in owners.values():
            app.declare_queue(queue)
        key = app.keys(healthy[0]).ready  # a REAP call's first key
        swept: list[tuple[float, str]] = []
        real_call = reaper_module.REAP.call

        def counting_call(client: Any, keys: Any, argv: Any) -> Any:
            reply = real_call(client, keys, argv)
            swept.append((time.monotonic(), keys[0]))
            return reply

        reaper_module.REAP.call = counting_call  # type: ignore[method-assign]
        reaper = reaper_module.Reaper(
            app, [owners[victim_port], *healthy], handle_signals=False, interval_s=1.0
        )
        thread = threading.Thread(target=reaper.run)
        thread.start()
        time.sleep(2.0)
        assert victim.process is not None
        os.kill(victim.process.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        time.sleep(args.stop)
        os.kill(victim.process.pid, signal.SIGCONT)
        resumed = time.monotonic()
        time.sleep(3.0)
        reaper.stop()
        thread.join(60)
        app.close()
    times = [at for at, first_key in swept if first_key == key and stopped <= at <= resumed]
    gaps = [b - a for a, b in zip([stopped, *times], [*times, resumed])]
    first = f"{times[0] - stopped:.1f} s" if times else "never"
    print(
        f"a master stopped {args.stop:.0f} s: a healthy queue swept {len(times)} times, "
        f"the longest gap {max(gaps):.1f} s, the first sweep {first} after the stop"
    )
    report = {
        "stop_s": args.stop,
        "sweeps_of_a_healthy_queue": len(times),
        "longest_gap_s": max(gaps),
        "first_sweep_after_stop_s": times[0] - stopped if times else None,
    }
    write_report(report, "cluster_silent_master", args.json)


if __name__ == "__main__":
    main()
