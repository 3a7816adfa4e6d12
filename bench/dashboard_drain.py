"""Whether open dashboard tabs slow a drain: a warm ``pool -c 2`` draining
``--jobs`` no-op jobs with no tab open, then with ``--tabs`` tabs of the overview
open on a ``fastq serve`` of the same Redis (each polls the queues' fragment every
3 s and the chart's data every 10 s, as the page does), alternating, ``--repeat``
times each. Reports each mode's best jobs/s and Redis CPU per job, and the ratios.

    python -m bench.dashboard_drain [--jobs 1000000] [--tabs 3] [--repeat 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import http.client
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench.harness import add_json_option, announce, pool_drain, write_report
from bench.http_enqueue import Serve
from bench.jobs.pool import noop
from fastq.testing.redis_server import RedisServer

NAMESPACE = "dashdrain"
# what the overview asks, and how often (fastq/serve/templates: htmx every 3 s, the
# chart every 10 s)
POLLS = (("/_/queues", 3.0), ("/_/history", 10.0))


class Tab(threading.Thread):
    """One open overview: its polls, on a keep-alive connection of its own."""

    def __init__(self, port: int, token_header: str, offset_s: float, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.header, self.offset_s, self.stop_event = port, token_header, offset_s, stop
        self.requests = 0

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        due = {path: time.monotonic() + self.offset_s for path, _ in POLLS}
        while not self.stop_event.is_set():
            now = time.monotonic()
            for path, every_s in POLLS:
                if due[path] <= now:
                    conn.request("GET", path, headers={"Authorization": self.header})
                    conn.getresponse().read()
                    self.requests += 1
                    due[path] = now + every_s
            self.stop_event.wait(max(0.0, min(due.values()) - time.monotonic()))
        conn.close()


def drain(client: redis.Redis, url: str, n: int, serve: Serve, tabs: int) -> dict[str, Any]:
    stop = threading.Event()
    port = serve.conn.port
    open_tabs = [Tab(port, serve.headers["Authorization"], i, stop) for i in range(tabs)]
    for tab in open_tabs:
        tab.start()
    try:
        result = pool_drain(client, url, NAMESPACE, noop, n, 2, 100, warm=True)
    finally:
        stop.set()
        for tab in open_tabs:
            tab.join()
    result["tab_requests"] = sum(tab.requests for tab in open_tabs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tabs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        client = redis.Redis.from_url(server.url)
        what = (
            f"a warm pool -c 2 draining {args.jobs:,} no-op jobs, with 0 and with "
            f"{args.tabs} overview tabs open; best of {args.repeat}"
        )
        machine, source = announce(client, "dashboard_drain", what)
        serve = Serve(server.url, NAMESPACE, Path(tmp) / "serve.log")
        runs: dict[str, list[dict[str, Any]]] = {"no_tabs": [], "tabs": []}
        try:
            for _ in range(args.repeat):
                runs["no_tabs"].append(drain(client, server.url, args.jobs, serve, 0))
                runs["tabs"].append(drain(client, server.url, args.jobs, serve, args.tabs))
        finally:
            serve.stop()
        best = {mode: max(rs, key=lambda r: r["jobs_s"]) for mode, rs in runs.items()}
        for mode, r in best.items():
            print(
                f"{mode:<8} {r['jobs_s']:>10,.0f} jobs/s   Redis {r['redis_cpu_us_per_job']:.2f} "
                f"µs/job   tab requests {r['tab_requests']}"
            )
        ratios = {
            "jobs_s": best["tabs"]["jobs_s"] / best["no_tabs"]["jobs_s"],
            "redis_cpu_us_per_job": best["tabs"]["redis_cpu_us_per_job"]
            / best["no_tabs"]["redis_cpu_us_per_job"],
        }
        print(
            f"tabs / no tabs: drain {ratios['jobs_s']:.3f}, "
            f"Redis CPU per job {ratios['redis_cpu_us_per_job']:.3f}"
        )
        write_report(
            {
                "machine": machine,
                "source": source,
                "args": vars(args),
                "runs": runs,
                "best": best,
                "ratios": ratios,
            },
            "dashboard_drain",
            args.json,
        )


if __name__ == "__main__":
    main()
