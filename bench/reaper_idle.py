"""What an idle reaper costs Redis when the namespace knows many queues: the commands
per second Redis runs for it (``INFO commandstats``, the commands scripts run
included) and their server time, over a window once its first sweeps are done.

One throwaway redis-server; ``--queues`` known queues (in the namespace's set, as
producers leave them), ``--busy`` of them with work the reaper must watch (a delayed
job each); one ``fastq reaper`` subprocess (interval 1 s, its default).

    python -m bench.reaper_idle                       # 20,000 queues, 5 s window
    python -m bench.reaper_idle --queues 200 --seconds 1 --json out.json
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import redis

import fastq
from bench.harness import ROOT, add_json_option, announce, child_env, write_report
from fastq.testing.redis_server import RedisServer

NAMESPACE = "idle"


def _commandstats(client: redis.Redis) -> tuple[int, int]:
    """(calls, usec) of every command so far."""
    stats = client.info("commandstats")
    return (
        sum(int(s["calls"]) for s in stats.values()),
        sum(int(s["usec"]) for s in stats.values()),
    )


def measure(url: str, queues: int, busy: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    names = [f"q{i}" for i in range(queues)]
    for start in range(0, queues, 1000):
        client.sadd(f"{NAMESPACE}:queues", *names[start : start + 1000])
    app = fastq.App(url, namespace=NAMESPACE)
    for name in names[:busy]:
        app.enqueue("later", queue=name, delay_s=3600)  # a due time the reaper watches
    app.close()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fastq",
            "reaper",
            "--app",
            "bench.jobs.pool",
            "--namespace",
            NAMESPACE,
        ],
        env=child_env(url),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(warmup_s)  # its first sweeps: every queue is new to it
        reaper = psutil.Process(proc.pid)
        cpu0 = sum(reaper.cpu_times()[:2])
        calls0, usec0 = _commandstats(client)
        t0 = time.monotonic()
        time.sleep(seconds)
        calls1, usec1 = _commandstats(client)
        took_s = time.monotonic() - t0
        cpu1 = sum(reaper.cpu_times()[:2])
        if proc.poll() is not None:
            raise RuntimeError(f"the reaper exited: {proc.stderr.read().decode()[-2000:]}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        client.close()
    return {
        "queues": queues,
        "busy": busy,
        "seconds": took_s,
        "commands_per_s": (calls1 - calls0) / took_s,
        "redis_cpu_share": (usec1 - usec0) / 1e6 / took_s,  # of one core
        "reaper_cpu_share": (cpu1 - cpu0) / took_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=20_000, help="known queues")
    parser.add_argument("--busy", type=int, default=10, help="queues with a delayed job")
    parser.add_argument("--seconds", type=float, default=5.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before it")
    add_json_option(parser)
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "reaper_idle",
            f"an idle fastq reaper over {args.queues} known queues, {args.busy} with a "
            f"delayed job: Redis commands/s over {args.seconds:g} s",
        )
        client.close()
        figures = measure(server.url, args.queues, args.busy, args.seconds, args.warmup)
    finally:
        server.cleanup()
    print(f"fastq.ACCELERATED={fastq.ACCELERATED} pid={os.getpid()}")
    print(
        f"{figures['queues']} known queues, {figures['busy']} busy: "
        f"{figures['commands_per_s']:,.0f} Redis commands/s, Redis CPU "
        f"{figures['redis_cpu_share'] * 100:.1f}% of a core, reaper CPU "
        f"{figures['reaper_cpu_share'] * 100:.1f}%"
    )
    write_report({"machine": machine, "source": source, **figures}, "reaper_idle", args.json)


if __name__ == "__main__":
    main()
