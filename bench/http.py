"""Jobs over HTTP (``fastq serve``): enqueued 1,000 per request and one per request,
then claimed and completed by N concurrent HTTP workers, beside the Python producer
and a warm ``fastq pool -c 2`` on the same queue, in the same run.

The server is uvicorn serving ``fastq.serve.app.create_app`` over
``bench.jobs.pool``'s app, its token required as deployed: one process, or
``--servers N`` of them on N ports sharing the Redis (as several ``fastq serve``
processes behind a balancer), the HTTP workers spread over them. Each HTTP worker
is a process of its own with one keep-alive connection: it claims ``--claim`` jobs
(one lease; a long poll of ``--wait`` seconds), reports them done in one batched ack
(``--ack batch``; ``single``: a ``done`` request a job), and stops at the first empty
claim. Its rate is the jobs over the time from the start to the last ack (not to the
end of the last, empty, long poll). No-op jobs: what HTTP costs per job. Ocypod (the
original design's HTTP job server) says it is not built for high throughput: its
figures are a floor, not the aim.

    python -m bench.http [--jobs 20000] [--singles 2000] [--clients 4] [--claim 100]
                         [--wait 0.5] [--ack batch|single] [--servers 1] [--json PATH]

``bench.http_enqueue`` measures the HTTP producer alone, with latencies.
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
import redis

import fastq
from bench.harness import (
    ROOT,
    BenchFailure,
    Probe,
    add_json_option,
    announce,
    check_queue,
    child_env,
    free_port,
    fresh_app,
    pool_drain,
    run_child,
    wait_child,
    write_report,
)
from bench.jobs import pool as pool_jobs
from fastq.testing.redis_server import RedisServer

NAMESPACE = "bench-http"
QUEUE = pool_jobs.noop.queue
ENQUEUE_BATCH = 1000  # jobs per HTTP enqueue request, as the Python producer's chunks
LEASE_S = 60


def server_app() -> Any:
    """The ASGI app the uvicorn under test serves (``--factory bench.http:server_app``):
    ``fastq serve``'s over ``bench.jobs.pool``'s app, on the Redis and namespace of
    ``FASTQ_REDIS_URL`` and ``BENCH_HTTP_NAMESPACE``, its token ``FASTQ_TOKEN``."""
    from fastq.serve.app import create_app

    app = pool_jobs.app
    app.configure(namespace=os.environ["BENCH_HTTP_NAMESPACE"])
    return create_app(app, os.environ["FASTQ_TOKEN"])


class Client:
    """One keep-alive HTTP/1.1 connection (the standard library's: the client's own
    cost per request stays small beside the server's)."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        self.conn.request("POST", path, body=orjson.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        return response.status, orjson.loads(response.read())

    def close(self) -> None:
        self.conn.close()


class Server:
    """One uvicorn process serving :func:`server_app`."""

    def __init__(self, url: str, token: str) -> None:
        self.port = free_port()
        self.token = token
        env = {**child_env(url), "BENCH_HTTP_NAMESPACE": NAMESPACE, "FASTQ_TOKEN": token}
        # one process each, not uvicorn's --workers: its supervisor kills a worker that
        # answers no health check within 5 s, which a saturated 2-core box makes happen
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "bench.http:server_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while True:  # up once a claim is answered
            if self.proc.poll() is not None:
                raise BenchFailure(f"the server exited at start: {self.stderr()}")
            try:
                client = Client(self.port, self.token)
                status, body = client.post(f"/api/v1/queues/{QUEUE}/claim", {"max": 1})
                client.close()
                if status != 200:
                    raise BenchFailure(f"a claim on an empty queue answered {status}: {body}")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchFailure("the server did not answer within 60 s") from None
                time.sleep(0.1)

    def cpu_s(self) -> float:
        """CPU seconds of the server so far."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def stderr(self) -> str:
        if self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the producers -----------------------------------------------------------------------


def python_enqueue(app: fastq.App, jobs: int, singles: int) -> dict[str, float]:
    """The Python producer: ``enqueue_many`` of ``jobs``, then ``singles`` ``enqueue``."""
    calls = [(i,) for i in range(jobs)]
    t0 = time.perf_counter()
    pool_jobs.noop.enqueue_many(calls)
    many_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(singles):
        pool_jobs.noop.enqueue(i)
    single_s = time.perf_counter() - t0
    if app.stats(QUEUE)["ready"] != jobs + singles:
        raise BenchFailure("the Python producer did not queue every job")
    return {"batched_jobs_s": jobs / many_s, "single_jobs_s": singles / single_s}


def cpu_s(servers: list[Server]) -> float:
    return sum(server.cpu_s() for server in servers)


def http_enqueue(
    app: fastq.App, servers: list[Server], jobs: int, singles: int
) -> dict[str, float]:
    """One HTTP producer: ``jobs`` in requests of ENQUEUE_BATCH, then ``singles``
    requests of one job."""
    client = Client(servers[0].port, servers[0].token)
    path = f"/api/v1/queues/{QUEUE}/jobs"
    batches = [
        [{"name": "noop", "args": [i]} for i in range(lo, min(lo + ENQUEUE_BATCH, jobs))]
        for lo in range(0, jobs, ENQUEUE_BATCH)
    ]
    cpu0 = cpu_s(servers)
    t0 = time.perf_counter()
    for batch in batches:
        status, body = client.post(path, batch)
        if status != 200 or len(body["ids"]) != len(batch):
            raise BenchFailure(f"an HTTP enqueue of {len(batch)} jobs answered {status}: {body}")
    many_s = time.perf_counter() - t0
    many_cpu = cpu_s(servers) - cpu0
    cpu0 = cpu_s(servers)
    t0 = time.perf_counter()
    for i in range(singles):
        status, body = client.post(path, {"name": "noop", "args": [i]})
        if status != 200:
            raise BenchFailure(f"an HTTP enqueue of one job answered {status}: {body}")
    single_s = time.perf_counter() - t0
    single_cpu = cpu_s(servers) - cpu0
    client.close()
    if app.stats(QUEUE)["ready"] != jobs + singles:
        raise BenchFailure("the HTTP producer did not queue every job")
    return {
        "batched_jobs_s": jobs / many_s,
        "single_jobs_s": singles / single_s,
        "batched_server_cpu_us_per_job": many_cpu / jobs * 1e6,
        "single_server_cpu_us_per_job": single_cpu / singles * 1e6,
    }


# -- the HTTP workers --------------------------------------------------------------------


def http_worker(port: int, token: str, claim_n: int, wait_s: float, ack: str, out: str) -> None:
    """Claim ``claim_n`` at a time (waiting up to ``wait_s`` for them) and report them
    done (``ack``: in one batched ack, or one request a job), until a claim finds
    none; write the wall-clock time of the last ack to ``out``."""
    client = Client(port, token)
    name = f"bench-{os.getpid()}"
    last = time.time()
    while True:
        body: Any = {"max": claim_n, "lease_s": LEASE_S, "worker": name, "wait_s": wait_s}
        status, reply = client.post(f"/api/v1/queues/{QUEUE}/claim", body)
        if status != 200:
            raise BenchFailure(f"a claim answered {status}: {reply}")
        if not reply["jobs"]:
            break
        if ack == "batch":
            done = [{"id": job["id"], "token": job["token"]} for job in reply["jobs"]]
            status, out_ = client.post(f"/api/v1/queues/{QUEUE}/ack", {"done": done})
            if status != 200 or out_["applied"] != len(done):
                raise BenchFailure(f"an ack answered {status}: {out_}")
        else:
            for job in reply["jobs"]:
                path = f"/api/v1/jobs/{job['id']}/done"
                status, out_ = client.post(path, {"token": job["token"]})
                if status != 200:
                    raise BenchFailure(f"a done answered {status}: {out_}")
        last = time.time()
    with open(out, "w") as f:
        f.write(repr(last))


def http_drain(
    client: redis.Redis,
    app: fastq.App,
    servers: list[Server],
    n: int,
    clients: int,
    claim_n: int,
    wait_s: float,
    ack: str,
) -> dict[str, float]:
    """``clients`` HTTP workers drain the ``n`` jobs queued, spread over ``servers``."""
    probe = Probe(client)
    cpu0 = cpu_s(servers)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        pids = []
        for i in range(clients):
            server, out = servers[i % len(servers)], os.path.join(tmp, str(i))
            pids.append(
                run_child(
                    lambda s=server, o=out: http_worker(s.port, s.token, claim_n, wait_s, ack, o)
                )
            )
        for pid in pids:
            wait_child(pid, "an HTTP worker", timeout_s=120 + n / 200)
        last = max(float(Path(tmp, str(i)).read_text()) for i in range(clients))
    wall = last - t0
    # the server's CPU and Redis' include the empty long polls at the end: a bound
    server_cpu = cpu_s(servers) - cpu0
    redis_cpu, evalsha = probe.delta()
    check_queue(app, QUEUE, n, "the HTTP workers' drain")
    if client.zcard(app.keys(QUEUE).leases):
        raise BenchFailure("the HTTP workers' drain left leases behind")
    return {
        "jobs": n,
        "clients": clients,
        "claim": claim_n,
        "wait_s": wait_s,
        "ack": ack,
        "wall_s": wall,
        "jobs_s": n / wall,
        "requests_per_job": (2 if ack == "batch" else 1 + claim_n) / claim_n,
        "server_cpu_us_per_job": server_cpu / n * 1e6,
        "redis_cpu_us_per_job": redis_cpu / n * 1e6,
        "evalsha_per_100_jobs": evalsha / n * 100,
    }


# -- the run -------------------------------------------------------------------------------


def measure(
    url: str,
    jobs: int,
    singles: int,
    clients: int,
    claim_n: int,
    n_servers: int,
    wait_s: float,
    ack: str,
) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    token = secrets.token_urlsafe(32)
    servers: list[Server] = []
    out: dict[str, Any] = {
        "jobs": jobs,
        "singles": singles,
        "servers": n_servers,
    }
    try:
        for _ in range(n_servers):
            servers.append(Server(url, token))
        app = fresh_app(client, url, NAMESPACE)
        out["python_enqueue"] = python_enqueue(app, jobs, singles)
        app = fresh_app(client, url, NAMESPACE)
        out["http_enqueue"] = http_enqueue(app, servers, jobs, singles)
        # the HTTP workers drain what the HTTP producer queued
        out["http_workers"] = http_drain(
            client, app, servers, jobs + singles, clients, claim_n, wait_s, ack
        )
    except BaseException:
        for server in servers:
            server.stop()
            print(server.stderr(), file=sys.stderr)
        raise
    for server in servers:
        server.stop()
    out["pool"] = pool_drain(client, url, NAMESPACE, pool_jobs.noop, jobs + singles, 2, None, True)
    client.close()
    py, web = out["python_enqueue"], out["http_enqueue"]
    out["ratios"] = {
        "http_workers_over_pool": out["http_workers"]["jobs_s"] / out["pool"]["jobs_s"],
        "http_batched_over_enqueue_many": web["batched_jobs_s"] / py["batched_jobs_s"],
        "http_single_over_enqueue": web["single_jobs_s"] / py["single_jobs_s"],
    }
    return out


def report(figures: dict[str, Any], clients: int, claim_n: int) -> None:
    """Print the figures; and whether the targets of issue 35 were kept."""
    py = figures["python_enqueue"]
    ratios = figures["ratios"]
    print(
        f"Python producer: enqueue_many {py['batched_jobs_s']:9,.0f} jobs/s; "
        f"enqueue {py['single_jobs_s']:7,.0f} jobs/s"
    )
    web = figures["http_enqueue"]
    print(
        f"HTTP producer:   {ENQUEUE_BATCH:,} a request {web['batched_jobs_s']:9,.0f} jobs/s "
        f"({ratios['http_batched_over_enqueue_many']:.2f} of enqueue_many, server "
        f"{web['batched_server_cpu_us_per_job']:.0f} us CPU a job); one a request "
        f"{web['single_jobs_s']:7,.0f} jobs/s ({ratios['http_single_over_enqueue']:.2f} "
        f"of enqueue, server {web['single_server_cpu_us_per_job']:.0f} us a job)"
    )
    w, pool = figures["http_workers"], figures["pool"]
    print(
        f"HTTP workers ({clients} processes, claim {claim_n}, "
        f"{'a batched ack a claim' if w['ack'] == 'batch' else 'a done per job'}): "
        f"{w['jobs_s']:7,.0f} jobs/s; server {w['server_cpu_us_per_job']:.0f} us CPU a job, "
        f"Redis {w['redis_cpu_us_per_job']:.1f} us a job"
    )
    print(
        f"fastq pool -c 2 (warm): {pool['jobs_s']:9,.0f} jobs/s; Redis "
        f"{pool['redis_cpu_us_per_job']:.1f} us a job"
    )
    print(
        f"HTTP workers / pool -c 2: {ratios['http_workers_over_pool']:.3f} (target 0.25); "
        f"HTTP enqueue / enqueue_many: {ratios['http_batched_over_enqueue_many']:.2f} "
        "(target 0.5)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs enqueued in batches")
    parser.add_argument("--singles", type=int, default=2_000, help="jobs enqueued one a call")
    parser.add_argument("--clients", type=int, default=4, help="HTTP worker processes")
    parser.add_argument("--claim", type=int, default=100, help="jobs an HTTP worker claims at once")
    parser.add_argument(
        "--wait", type=float, default=0.5, help="an HTTP worker's claim waits this long (s)"
    )
    parser.add_argument(
        "--ack",
        choices=("batch", "single"),
        default="batch",
        help="HTTP workers ack a claim's jobs in one request, or one done request a job",
    )
    parser.add_argument(
        "--servers", type=int, default=1, help="uvicorn processes, each on its own port"
    )
    add_json_option(parser)
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        machine, source = announce(
            client,
            "bench.http",
            f"{args.jobs:,} no-op jobs in batches and {args.singles:,} one by one, over HTTP "
            f"and from Python; drained by {args.clients} HTTP workers and by a warm pool -c 2",
        )
        client.close()
        figures = measure(
            server.url,
            args.jobs,
            args.singles,
            args.clients,
            args.claim,
            args.servers,
            args.wait,
            args.ack,
        )
    finally:
        server.cleanup()
    report(figures, args.clients, args.claim)
    write_report({**figures, "machine": machine, "source": source}, "http", args.json)


if __name__ == "__main__":
    main()
