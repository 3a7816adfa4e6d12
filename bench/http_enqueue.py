"""What enqueueing over HTTP (``fastq serve``) costs beside Python's own enqueue:
jobs/s of arrays of ``--batch`` jobs a request against ``enqueue_many`` of the same
batches, and the latency of one job a request against one ``enqueue``, in one run.

One throwaway redis-server; one ``fastq serve`` subprocess (as users run it, its
access log off) and one client on a keep-alive connection (the standard library's
``http.client``, so that the client costs little of what is measured). The modes
alternate within each repetition; the best throughput of each is kept, and the
latencies are pooled. Each mode's jobs are counted in Redis (every one in, none
twice) before the next. The HTTP workers' side is not measured here.

    python -m bench.http_enqueue [--jobs 50000] [--batch 1000] [--singles 2000]
                                 [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import redis

import fastq
from bench.harness import ROOT, BenchFailure, add_json_option, announce, write_report
from fastq.testing.redis_server import RedisServer

TOKEN = "bench-token-0123456789abcdef"
QUEUE = "bench"
_LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+) ")


class Serve:
    """A ``fastq serve`` subprocess on a free port, and a keep-alive client of it."""

    def __init__(self, url: str, namespace: str, log: Path) -> None:
        env = dict(os.environ, FASTQ_REDIS_URL=url, FASTQ_TOKEN=TOKEN, PYTHONPATH=str(ROOT))
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fastq",
                    "serve",
                    "--port",
                    "0",
                    "--namespace",
                    namespace,
                    "--no-access-log",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while (found := _LISTENING.search(log.read_bytes())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchFailure(f"fastq serve did not start:\n{log.read_text()}")
            time.sleep(0.05)
        self.conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=60)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def enqueue(self, body: bytes) -> list[str]:
        self.conn.request("POST", f"/api/v1/queues/{QUEUE}/jobs", body, self.headers)
        reply = self.conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise BenchFailure(f"POST jobs: {reply.status} {data[:300]!r}")
        ids: list[str] = orjson.loads(data)["ids"]
        return ids

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def http_batches(serve: Serve, jobs: int, batch: int) -> float:
    """Seconds to enqueue ``jobs`` no-op jobs over HTTP, ``batch`` a request (the
    client encodes each request's JSON inside the timing, as a client must)."""
    t0 = time.perf_counter()
    for start in range(0, jobs, batch):
        body = orjson.dumps([{"name": "noop", "args": [i]} for i in range(start, start + batch)])
        serve.enqueue(body)
    return time.perf_counter() - t0


def python_batches(app: fastq.App, jobs: int, batch: int) -> float:
    t0 = time.perf_counter()
    for start in range(0, jobs, batch):
        app.enqueue_many("noop", [(i,) for i in range(start, start + batch)], queue=QUEUE)
    return time.perf_counter() - t0


def http_singles(serve: Serve, n: int) -> list[float]:
    """Milliseconds of each of ``n`` requests of one job."""
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        serve.enqueue(orjson.dumps({"name": "noop", "args": [i]}))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def python_singles(app: fastq.App, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        app.enqueue("noop", (i,), queue=QUEUE)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def check_queued(client: redis.Redis, app: fastq.App, n: int, what: str) -> None:
    """Every job of the mode is in, once; then the queue is emptied for the next."""
    keys = app.keys(QUEUE)
    held, listed = client.hlen(keys.jobs), client.llen(keys.ready)
    if (held, listed) != (n, n):
        raise BenchFailure(f"{what}: {held} envelopes and {listed} ready ids, not {n}")
    client.delete(keys.jobs, keys.ready)


def measure(url: str, jobs: int, batch: int, n_singles: int, repeat: int, log: Path) -> Any:
    client = redis.Redis.from_url(url)
    app = fastq.App(url, namespace="bench")
    app.declare_queue(QUEUE)
    serve = Serve(url, "bench", log)
    try:
        # connect and load the scripts outside the timings (the app first: it makes the
        # queue known to the namespace, which the server's app, registering nothing, reads)
        app.enqueue("noop", queue=QUEUE)
        serve.enqueue(b'{"name": "noop"}')
        check_queued(client, app, 2, "warm-up")
        best = {"http": float("inf"), "python": float("inf")}
        latencies: dict[str, list[float]] = {"http": [], "python": []}
        for _ in range(repeat):
            best["python"] = min(best["python"], python_batches(app, jobs, batch))
            check_queued(client, app, jobs, "enqueue_many")
            best["http"] = min(best["http"], http_batches(serve, jobs, batch))
            check_queued(client, app, jobs, "HTTP batches")
            latencies["python"] += python_singles(app, n_singles)
            check_queued(client, app, n_singles, "enqueue")
            latencies["http"] += http_singles(serve, n_singles)
            check_queued(client, app, n_singles, "HTTP singles")
    finally:
        serve.stop()
        app.close()
        client.close()
    out: dict[str, Any] = {"jobs": jobs, "batch": batch, "singles": n_singles, "repeat": repeat}
    for mode in ("python", "http"):
        lat = latencies[mode]
        out[mode] = {
            "batched_jobs_per_s": jobs / best[mode],
            "single_p50_ms": pct(lat, 50),
            "single_p99_ms": pct(lat, 99),
            "singles_per_s": len(lat) / (sum(lat) / 1000),
        }
    py, web = out["python"], out["http"]
    out["ratios"] = {
        "batched": web["batched_jobs_per_s"] / py["batched_jobs_per_s"],
        "single_p50": web["single_p50_ms"] / py["single_p50_ms"],
        "single_p99": web["single_p99_ms"] / py["single_p99_ms"],
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per blast")
    parser.add_argument("--batch", type=int, default=1_000, help="jobs per request or call")
    parser.add_argument("--singles", type=int, default=2_000, help="one-job requests per run")
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    if args.jobs % args.batch:
        parser.error("--jobs must be a multiple of --batch")
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "bench.http_enqueue",
            "enqueue over HTTP (fastq serve, one client) vs App.enqueue_many / App.enqueue",
        )
        client.close()
        log = Path(server.dir) / "serve.log"
        figures = measure(server.url, args.jobs, args.batch, args.singles, args.repeat, log)
    for mode, label in (("python", "App.enqueue_many/enqueue"), ("http", "fastq serve")):
        f = figures[mode]
        print(
            f"{label:>24}: {f['batched_jobs_per_s']:9,.0f} jobs/s ({args.jobs:,} jobs, "
            f"{args.batch:,} a call, best of {args.repeat}); one job: p50 "
            f"{f['single_p50_ms']:.3f} ms, p99 {f['single_p99_ms']:.3f} ms "
            f"({f['singles_per_s']:,.0f}/s, {args.singles * args.repeat:,} calls)"
        )
    r = figures["ratios"]
    print(
        f"HTTP / Python: batched throughput {r['batched']:.2f}x, one job p50 "
        f"{r['single_p50']:.2f}x, p99 {r['single_p99']:.2f}x"
    )
    write_report({**figures, "machine": machine, "source": source}, "http_enqueue", args.json)


if __name__ == "__main__":
    main()
