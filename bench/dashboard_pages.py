"""How long the dashboard's pages take with many queues and many queued jobs: each
page of ``fastq serve`` asked ``--requests`` times (after one warm-up request) over
a keep-alive connection with the token: its median and its slowest in ms, and the
Redis CPU one request costs (µs, from INFO commandstats). The first request of a
page is timed apart: the server reads each queue's history at most every 10 s, so
the requests that follow it within 10 s (most of them) find it read.

One throwaway redis-server holding ``--queues`` queues and ``--jobs`` ready jobs
spread evenly over them, ``--scheduled`` delayed jobs per queue, a few dead ones
and a full ring of history (two hours of 10-second slots, the charts' most); one
``fastq serve`` subprocess (its access log off). The pages read Redis only (no pool
runs): what an operator's browser tab costs Redis and the server.

    python -m bench.dashboard_pages [--queues 100] [--jobs 1000000] [--scheduled 100]
                                    [--requests 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis

import fastq
from bench.harness import BenchFailure, add_json_option, announce, write_report
from bench.http_enqueue import Serve
from fastq.protocol.history import SLOT_MS, SLOTS, history_key
from fastq.protocol.keys import QueueKeys
from fastq.testing.redis_server import RedisServer

CHUNK = 10_000


def pages(first: str) -> list[str]:
    return [
        "/",
        "/_/queues",
        "/_/history",
        f"/queues/{first}",
        f"/queues/{first}?state=queued&page=100",
        f"/queues/{first}?state=scheduled",
        f"/queues/{first}?state=dead",
        f"/_/history?queue={first}",
        "/workers",
        "/periodic",
    ]


def fill(app: fastq.App, r: redis.Redis, queues: list[str], jobs: int, scheduled: int) -> None:
    per_queue = jobs // len(queues)
    app.declare_queue(*queues)
    for q in queues:
        for start in range(0, per_queue, CHUNK):
            n = min(CHUNK, per_queue - start)
            app.enqueue_many("noop", [(i,) for i in range(start, start + n)], queue=q)
        if scheduled:
            app.enqueue_many("noop", [(i,) for i in range(scheduled)], queue=q, delay_s=3600)
        keys = app.keys(q)
        fill_history(r, keys)
        for i in range(3):  # dead jobs, as a worker buries them
            job_id = app.enqueue("noop", args=[-i], queue=q, delay_s=7200)
            r.zrem(keys.scheduled, job_id)
            r.zadd(keys.dead, {job_id: 1000 + i})


def fill_history(r: redis.Redis, keys: QueueKeys) -> None:
    """A full ring of history (two hours of slots, each with jobs), as the ack script
    leaves it on a busy queue: the most a chart's read finds."""
    seconds, micros = r.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    last = now_ms - now_ms % SLOT_MS
    ring = {}
    for n in range(SLOTS):
        slot_ms = last - n * SLOT_MS
        ring[str((slot_ms // SLOT_MS) % SLOTS)] = f"{slot_ms}:{1000 + n}:{n % 7}"
    r.hset(history_key(keys), mapping=ring)


def redis_usec(r: redis.Redis) -> int:
    """Redis' CPU spent in commands so far, in µs (INFO commandstats)."""
    stats = r.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values())


def get(serve: Serve, path: str) -> float:
    """Milliseconds of one GET of ``path``, its whole body read."""
    t0 = time.perf_counter()
    serve.conn.request("GET", path, headers={"Authorization": serve.headers["Authorization"]})
    reply = serve.conn.getresponse()
    body = reply.read()
    elapsed = (time.perf_counter() - t0) * 1000
    if reply.status != 200:
        raise BenchFailure(f"GET {path}: {reply.status} {body[:300]!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--scheduled", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20)
    add_json_option(parser)
    args = parser.parse_args()
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        r = redis.Redis.from_url(server.url)
        what = (
            f"dashboard pages with {args.queues} queues, {args.jobs:,} ready jobs, "
            f"{args.scheduled} scheduled, 3 dead and 720 history slots per queue; "
            f"{args.requests} requests a page"
        )
        machine, source = announce(r, "dashboard_pages", what)
        namespace = f"b{uuid.uuid4().hex[:8]}"
        app = fastq.App(server.url, namespace=namespace)
        queues = [f"q{i:03d}" for i in range(args.queues)]
        t0 = time.perf_counter()
        fill(app, r, queues, args.jobs, args.scheduled)
        print(f"filled in {time.perf_counter() - t0:.1f} s")
        total = sum(app.stats(q)["ready"] for q in queues)
        if total != args.jobs // args.queues * args.queues:
            raise BenchFailure(f"{total} ready jobs, not {args.jobs}")
        serve = Serve(server.url, namespace, Path(tmp) / "serve.log")
        figures = {}
        try:
            for path in pages(queues[0]):
                first = get(serve, path)  # warm-up: the server's caches are cold
                before = redis_usec(r)
                times = [get(serve, path) for _ in range(args.requests)]
                # less the INFO call itself (a few µs): counted once, over every request
                used_us = (redis_usec(r) - before) / args.requests
                figures[path] = {
                    "first_ms": round(first, 2),
                    "p50_ms": round(statistics.median(times), 2),
                    "max_ms": round(max(times), 2),
                    "redis_us": round(used_us, 1),
                }
                print(
                    f"{path:<40} first {first:7.2f} ms"
                    f"   p50 {figures[path]['p50_ms']:7.2f} ms"
                    f"   max {figures[path]['max_ms']:7.2f} ms"
                    f"   Redis {used_us:8.1f} µs"
                )
        finally:
            serve.stop()
        write_report(
            {"machine": machine, "source": source, "args": vars(args), "pages": figures},
            "dashboard_pages",
            args.json,
        )


if __name__ == "__main__":
    main()
