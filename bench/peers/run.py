"""The peer harness: the same workloads with fastq and its peers, in one run.

Each peer runs from its own virtualenv under ``bench/peers/.venvs/`` (or, for
BullMQ, ``bench/peers/bullmq/node_modules``), installed by this script at pinned
versions the first time and reused afterwards. Each workload of each peer gets a
throwaway ``redis-server`` of its own (never the Redis on port 6379).

Every job of every peer does the same work: it marks job ``i`` as run in a
buffer of its process, which a flusher sends in one pipeline per ~100 jobs (or
20 ms): ``SETBIT`` of bit ``i`` of a bitmap per job and ``INCRBY`` of a counter
(``drivers/counting.py``). A run counts as correct only when the counter and the
bitmap both say exactly N: a counter above the bitmap is duplicates, a bitmap
below N is losses.

Workloads:

  drain   N no-op jobs enqueued first, then 2 worker processes launched as the
          peer's documentation recommends; timed from the launch to the last job
  io      N jobs that each sleep 5 ms (``time.sleep`` in sync peers, ``asyncio.sleep``
          in async ones), drained as the drain, at each peer's own concurrency
  rtt     the drain, every worker and the producer connecting through
          ``bench/rtt_proxy.py`` holding each chunk 0.5 ms each way (1 ms RTT)
  blast   N jobs enqueued by the peer's recommended producer API for bulk,
          timed by the producer; then drained (untimed) to check the count
  memory  N ``send_email("user123@example.com", "Your weekly digest", 42)`` jobs
          enqueued the same way: Redis ``used_memory`` after minus before, per job;
          then drained (untimed) to check the count (runs only: the jobs carry no
          index, so a duplicate and a loss could cancel out; the other two
          workloads tell them apart)

    python -m bench.peers.run                      # every peer: drain, io, rtt, blast
    python -m bench.peers.run --workloads memory   # the memory workload on its own
    python -m bench.peers.run --quick               # every peer, small sizes
    python -m bench.peers.run --quick --only fastq  # fastq alone, small sizes
    python -m bench.peers.run --only fastq,rq,dramatiq --drain-jobs 5000
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import redis

import fastq
from bench.harness import (
    RESULTS,
    ROOT,
    BenchFailure,
    Proxy,
    add_progress_option,
    check_queue,
    configure_progress,
    drain_bar,
    machine_info,
    source_state,
)
from bench.peers.chart import draw_chart
from fastq.testing.redis_server import RedisServer

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"  # on the workers' PYTHONPATH: each peer's venv has no bench
VENVS = HERE / ".venvs"
BULLMQ = HERE / "bullmq"

COUNT_KEY = "peerbench:count"  # drivers/counting.py and bullmq/bench.mjs
SEEN_KEY = "peerbench:seen"
FASTQ_NAMESPACE = "peerbench"  # drivers/fastq_tasks.py's app
WORKERS = 2  # worker processes per peer
POLL_S = 0.01  # how often a drain polls the counter
SETTLE_S = 1.0  # after the count reaches N: how long to watch for duplicates
STALL_S = 60.0  # no progress for this long: the drain failed
STOP_S = 10.0  # a worker's grace after SIGTERM before SIGKILL (the clean stops took <= 2.4 s)
WORKLOADS = ("drain", "io", "rtt", "blast", "memory")
DEFAULT_WORKLOADS = ("drain", "io", "rtt", "blast")  # issue 12's; memory on request
KINDS = {"drain": "noop", "io": "io", "rtt": "noop", "blast": "noop", "memory": "mail"}
# RQ's documented production worker forks per job (~30 jobs/s on 2 cores): its full
# sizes alone would take most of an hour
DEFAULT_CAP = "rq=1000"
FASTQ_CONCURRENCY = 10  # async io jobs per fastq child (arq, SAQ and BullMQ's default)
# peers whose io jobs in flight per process --io-concurrency sets (with fastq's)
ASYNC_PEERS = ("arq", "saq", "taskiq", "streaq")


@dataclass
class Peer:
    """One queue library: how to install it, produce with it, and run its workers."""

    name: str
    requirements: list[str]  # pip requirement strings; empty: no install (fastq, node)
    module: str  # the driver module in drivers/ (or bench.mjs for node)
    workers: Callable[[Path], list[list[str]]]  # venv bin dir -> one argv per process
    how: str  # the worker setting, shown in the table
    io_how: str = ""  # jobs at a time in the io workload, over both processes
    node: bool = False
    report_packages: list[str] = field(default_factory=list)

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    def bin(self) -> Path:
        return Path(sys.executable).parent if not self.requirements else self.venv / "bin"

    def python(self) -> str:
        return sys.executable if not self.requirements else str(self.venv / "bin" / "python")


def _two(argv: list[str]) -> list[list[str]]:
    return [list(argv) for _ in range(WORKERS)]


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "fastq",
            [],
            "fastq_tasks",
            lambda b: [
                [
                    sys.executable,
                    "-m",
                    "fastq",
                    "--log-level",
                    "WARNING",
                    "pool",
                    "-c",
                    str(WORKERS),
                    "--app",
                    "fastq_tasks",
                    "--namespace",
                    FASTQ_NAMESPACE,
                    "-q",
                    "noop",
                ]
            ],
            "fastq pool -c 2",
            "2 (sync jobs: one per child)",
        ),
        Peer(
            "rq",
            ["rq==3.0.0"],
            "rq_tasks",
            lambda b: _two(
                [
                    str(b / "rq"),
                    "worker",
                    "--burst",
                    "--quiet",
                    "--url",
                    os.environ["PEERBENCH_URL"],
                    "noop",
                ]
            ),
            "rq worker --burst x2",
            "2 (one work horse per worker)",
            report_packages=["rq", "redis"],
        ),
        Peer(
            "dramatiq",
            ["dramatiq[redis]==2.2.1"],
            "dramatiq_tasks",
            lambda b: [
                [str(b / "dramatiq"), "dramatiq_tasks", "-p", str(WORKERS), "-t", "1", "-Q", "noop"]
            ],
            "dramatiq -p 2 -t 1",
            "2 (one thread per process)",
            report_packages=["dramatiq", "redis"],
        ),
        Peer(
            "huey",
            ["huey==3.5.4", "redis"],
            "huey_tasks",
            lambda b: [
                [
                    str(b / "huey_consumer"),
                    "huey_tasks.huey",
                    "-w",
                    str(WORKERS),
                    "-k",
                    "process",
                    "-q",
                ]
            ],
            "huey_consumer -w 2 -k process",
            "2 (one per worker process)",
            report_packages=["huey", "redis"],
        ),
        Peer(
            "celery",
            ["celery[redis]==5.7.0"],
            "celery_tasks",
            lambda b: [
                [
                    str(b / "celery"),
                    "-A",
                    "celery_tasks",
                    "worker",
                    "-c",
                    str(WORKERS),
                    "-P",
                    "prefork",
                    "--prefetch-multiplier",
                    "16",
                    "-Q",
                    "noop",
                    "--without-gossip",
                    "--without-mingle",
                    "--loglevel",
                    "WARNING",
                ]
            ],
            "celery worker -c 2 --prefetch-multiplier 16",
            "2 (prefork -c 2)",
            report_packages=["celery", "kombu", "redis"],
        ),
        Peer(
            "arq",
            ["arq==0.28.0"],
            "arq_tasks",
            lambda b: _two([str(b / "arq"), "arq_tasks.WorkerSettings"]),
            "arq x2 (max_jobs 10)",
            "20 (max_jobs 10 x2, asyncio.sleep)",
            report_packages=["arq", "redis"],
        ),
        Peer(
            "saq",
            ["saq[redis]==0.26.4", "typing_extensions"],
            "saq_tasks",
            lambda b: [[str(b / "saq"), "saq_tasks.settings", "--workers", str(WORKERS)]],
            "saq --workers 2 (concurrency 10)",
            "20 (concurrency 10 x2, asyncio.sleep)",
            report_packages=["saq", "redis"],
        ),
        Peer(
            "taskiq",
            ["taskiq==0.13.0", "taskiq-redis==1.2.4"],
            "taskiq_tasks",
            lambda b: [
                [str(b / "taskiq"), "worker", "taskiq_tasks:broker", "--workers", str(WORKERS)]
            ],
            "taskiq worker --workers 2 (RedisStreamBroker)",
            "200 (max-async-tasks 100 x2, asyncio.sleep)",
            report_packages=["taskiq", "taskiq-redis", "redis"],
        ),
        Peer(
            "streaq",
            ["streaq==7.2.0", "redis"],
            "streaq_tasks",
            lambda b: [
                [str(b / "streaq"), "run", "streaq_tasks:worker", "--workers", str(WORKERS)]
            ],
            "streaq run --workers 2 (concurrency 16)",
            "32 (concurrency 16 x2, anyio.sleep)",
            report_packages=["streaq", "coredis", "redis"],
        ),
        Peer(
            "bullmq",
            [],
            "bench.mjs",
            lambda b: _two(["node", str(BULLMQ / "bench.mjs"), "worker", "10"]),
            "node Worker x2 (concurrency 10)",
            "20 (concurrency 10 x2, setTimeout)",
            node=True,
        ),
    )
}


# how each producer enqueues in bulk (drivers/*_tasks.py, bullmq/bench.mjs)
PRODUCERS = {
    "fastq": "job.enqueue_many",
    "rq": "Queue.enqueue_many, 1,000 a call",
    "dramatiq": "actor.send() in a loop (no bulk API)",
    "huey": "task() in a loop (no bulk API)",
    "celery": "apply_async in a loop, one producer",
    "arq": "enqueue_job, 1,000 gathered",
    "saq": "Queue.enqueue, 1,000 gathered",
    "taskiq": "task.kiq, 1,000 gathered",
    "streaq": "Worker.enqueue_many, 1,000 a call",
    "bullmq": "Queue.addBulk, 1,000 a call",
}


# -- installing -------------------------------------------------------------------


def ensure_installed(peer: Peer) -> dict[str, str]:
    """Install the peer's pinned packages when missing; return the versions in use."""
    if peer.node:
        if not (BULLMQ / "node_modules" / "bullmq").is_dir():
            if shutil.which("npm") is None:
                raise BenchFailure("bullmq: npm not found")
            print("  installing bullmq (npm ci) ...", flush=True)
            try:
                _check_call(["npm", "ci", "--no-audit", "--no-fund"], cwd=BULLMQ)
            except BenchFailure:  # npm 11 refuses this lock (other platforms' optional
                # packages of msgpackr-extract); install keeps the locked versions
                _check_call(["npm", "install", "--no-audit", "--no-fund", "--no-save"], cwd=BULLMQ)
        versions = {}
        for pkg in ("bullmq", "ioredis"):
            meta = json.loads((BULLMQ / "node_modules" / pkg / "package.json").read_text())
            versions[pkg] = meta["version"]
        versions["node"] = subprocess.check_output(["node", "--version"], text=True).strip()
        return versions
    if not peer.requirements:
        return {
            "fastq": fastq.__version__ if hasattr(fastq, "__version__") else "source",
            "fastq_accelerated": str(fastq.ACCELERATED),
            "commit": _commit(),
        }
    stamp = peer.venv / "requirements.sha1"
    wanted = hashlib.sha1("\n".join(peer.requirements).encode()).hexdigest()
    if not stamp.exists() or stamp.read_text() != wanted:
        print(f"  installing {peer.name} ({' '.join(peer.requirements)}) ...", flush=True)
        shutil.rmtree(peer.venv, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        _check_call([base, "-m", "venv", str(peer.venv)])
        _check_call(
            [
                peer.python(),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                *peer.requirements,
            ]
        )
        stamp.write_text(wanted)
    out = subprocess.check_output([peer.python(), "-m", "pip", "list", "--format", "json"])
    installed = {p["name"].lower(): p["version"] for p in json.loads(out)}
    return {pkg: installed.get(pkg, "?") for pkg in peer.report_packages}


def _check_call(argv: list[str], cwd: Optional[Path] = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise BenchFailure(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def _commit() -> str:
    try:
        return subprocess.check_output(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True, stderr=subprocess.DEVNULL
        ).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


# -- running ----------------------------------------------------------------------


@dataclass
class Setup:
    """How the workloads run, beyond their sizes (the command line's options)."""

    io_ms: float = 5.0  # the io job's sleep
    rtt_hold_ms: float = 0.5  # the rtt workload's proxy hold, each way
    fastq_concurrency: int = 0  # >0: fastq's io jobs are async, this many per child
    fastq_async_flag: str = ""  # the pool option that sets it ("": fastq's default)
    io_concurrency: int = 0  # >0: the async peers' io jobs in flight per process (0: their own)


def fastq_async_support() -> tuple[bool, str]:
    """Whether this checkout's fastq takes ``async def`` jobs, and the ``fastq pool``
    option for how many run at once in a child (``--async-jobs``; "" when it takes
    none)."""
    try:
        fastq.App("redis://127.0.0.1:1/0", namespace="probe").job(queue="probe")(_probe)
    except TypeError:  # "is a coroutine function": no async jobs in this fastq
        return False, ""
    return True, "--async-jobs"


async def _probe() -> None:
    """An ``async def`` job, for ``fastq_async_support``."""


def peer_env(peer: Peer, url: str, setup: Optional[Setup] = None) -> dict[str, str]:
    setup = setup or Setup()
    paths = [str(DRIVERS)] + ([str(ROOT)] if not peer.requirements and not peer.node else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    env.update(PEERBENCH_URL=url, PYTHONPATH=os.pathsep.join(paths), FASTQ_REDIS_URL=url)
    env["PEERBENCH_IO_MS"] = str(setup.io_ms)
    if setup.fastq_concurrency:  # fastq_tasks.io is then an async def job
        env["PEERBENCH_FASTQ_ASYNC"] = "1"
    if setup.io_concurrency:  # read by the async peers' drivers (taskiq: an option)
        env["PEERBENCH_IO_CONCURRENCY"] = str(setup.io_concurrency)
    if peer.requirements:  # the venv's console scripts and python first
        env["PATH"] = os.pathsep.join([str(peer.bin()), env.get("PATH", "")])
    return env


def produce(
    peer: Peer, url: str, n: int, kind: str = "noop", setup: Optional[Setup] = None
) -> float:
    """The peer's producer enqueues ``n`` jobs of ``kind`` (noop, io or mail);
    returns its own timing in seconds."""
    if peer.node:
        argv = ["node", str(BULLMQ / "bench.mjs"), "enqueue", str(n), kind]
    else:
        argv = [peer.python(), str(DRIVERS / "produce.py"), peer.module, str(n), kind]
    proc = subprocess.run(
        argv,
        cwd=BULLMQ if peer.node else DRIVERS,
        env=peer_env(peer, url, setup),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchFailure(
            f"{peer.name} producer failed: {last}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["jobs"] != n:
        raise BenchFailure(f"{peer.name} producer enqueued {result['jobs']} of {n}")
    return float(result["seconds"])


class Workers:
    """The peer's worker processes, each in its own session so that a stop reaches
    the children it forked."""

    def __init__(self, peer: Peer, url: str, log_dir: Path, setup: Optional[Setup] = None) -> None:
        self.peer, self.url, self.setup = peer, url, setup or Setup()
        self.log_path = log_dir / f"{peer.name}-workers.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        os.environ["PEERBENCH_URL"] = self.url  # read by the argv builders
        env = peer_env(self.peer, self.url, self.setup)
        extra = []
        if self.peer.name == "fastq" and self.setup.fastq_async_flag:
            extra = [self.setup.fastq_async_flag, str(self.setup.fastq_concurrency)]
        elif self.peer.name == "taskiq" and self.setup.io_concurrency:
            extra = ["--max-async-tasks", str(self.setup.io_concurrency)]
        with open(self.log_path, "ab") as log:
            for argv in self.peer.workers(self.peer.bin()):
                self.procs.append(
                    subprocess.Popen(
                        argv + extra,
                        cwd=BULLMQ if self.peer.node else DRIVERS,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def all_exited(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def stop(self) -> None:
        """SIGTERM (each peer's graceful stop), then SIGKILL what is left of the group."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def counts(client: redis.Redis) -> tuple[int, int]:
    """(runs, distinct jobs run) so far."""
    pipe = client.pipeline(transaction=False)
    pipe.get(COUNT_KEY)
    pipe.bitcount(SEEN_KEY)
    runs, distinct = pipe.execute()
    return int(runs or 0), int(distinct)


def drain(
    peer: Peer,
    client: redis.Redis,
    url: str,
    n: int,
    log_dir: Path,
    indexed: bool = True,
    setup: Optional[Setup] = None,
    label: str = "",
) -> dict[str, Any]:
    """Launch the workers (on ``url``) on ``n`` queued jobs; time until the counter
    (read by ``client``) reaches ``n``, watch ``SETTLE_S`` more for duplicates, stop
    them; check the counts (``indexed``: the jobs set their bit, so duplicates and
    losses are told apart). ``label`` names the drain's bar (default: the peer)."""
    if counts(client) != (0, 0):
        raise BenchFailure(f"{peer.name}: a job ran before the workers started")
    workers = Workers(peer, url, log_dir, setup)
    elapsed: Optional[float] = None
    first: Optional[float] = None  # when the first run showed: start-up is over
    try:
        # opened before the clock starts, fed by the poll the timing needs anyway
        with drain_bar(label or peer.name, n) as shown:
            t0 = time.perf_counter()
            workers.start()
            last, last_change = 0, time.monotonic()
            while True:
                runs, _ = counts(client)
                now = time.monotonic()
                if runs and first is None:
                    first = time.perf_counter() - t0
                if runs >= n:
                    elapsed = time.perf_counter() - t0
                    shown.update(runs, final=True)
                    break
                shown.update(runs)
                if runs != last:
                    last, last_change = runs, now
                elif now - last_change > STALL_S or workers.all_exited():
                    break
                time.sleep(POLL_S)
        if elapsed is not None:
            time.sleep(SETTLE_S)
        before_stop = counts(client)[0]
    finally:
        workers.stop()
    runs, distinct = counts(client)
    if not indexed:  # runs only: at least this many duplicates or losses
        distinct = min(runs, n)
    result = {
        "jobs": n,
        "runs": runs,
        "distinct": distinct,
        "duplicates": runs - distinct,
        "lost": n - distinct,
        "ok": runs == distinct == n,
        "runs_before_stop": before_stop,  # the rest ran while the workers stopped
    }
    if elapsed is not None:
        result.update(wall_s=elapsed, jobs_s=n / elapsed, first_run_s=first)
        if first is not None and elapsed > first:  # the rate once the workers are up
            result["steady_jobs_s"] = (n - 1) / (elapsed - first)
    if not result["ok"]:
        result["log_tail"] = workers.log_tail()
    return result


def run_workload(
    peer: Peer,
    workload: str,
    n: int,
    log_dir: Path,
    fastq_app: Any = None,
    setup: Optional[Setup] = None,
) -> dict[str, Any]:
    setup = setup or Setup()
    label = f"{peer.name} {workload}"  # the drain's bar
    if workload != "io":  # async jobs and their concurrency are the io workload's only
        setup = Setup(setup.io_ms, setup.rtt_hold_ms)  # sync jobs, no pool option
    elif peer.name != "fastq":
        setup = Setup(setup.io_ms, setup.rtt_hold_ms, io_concurrency=setup.io_concurrency)
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    try:
        if workload in ("drain", "io"):
            produce(peer, server.url, n, KINDS[workload], setup)
            result = drain(peer, client, server.url, n, log_dir, setup=setup, label=label)
        elif workload == "rtt":  # the peer's every connection through the proxy
            proxy = Proxy(server.port, setup.rtt_hold_ms)
            try:
                produce(peer, proxy.url(), n, "noop", setup)
                result = drain(peer, client, proxy.url(), n, log_dir, setup=setup, label=label)
            finally:
                hold = proxy.stop()
            result["proxy_hold"] = hold
        elif workload == "memory":
            before = client.info("memory")["used_memory"]
            produce(peer, server.url, n, "mail")
            after = client.info("memory")["used_memory"]
            result = drain(peer, client, server.url, n, log_dir, indexed=False, label=label)
            for key in ("wall_s", "first_run_s", "steady_jobs_s"):
                result.pop(key, None)
            result["drain_jobs_s"] = result.pop("jobs_s", None)
            result.update(
                used_memory_before=before,
                used_memory_after=after,
                bytes_per_job=(after - before) / n,
            )
        else:  # blast: the producer's figure; the drain only checks the count
            seconds = produce(peer, server.url, n)
            result = drain(peer, client, server.url, n, log_dir, label=label)
            for key in ("wall_s", "first_run_s", "steady_jobs_s"):
                result.pop(key, None)
            result["drain_jobs_s"] = result.pop("jobs_s", None)
            result.update(wall_s=seconds, jobs_s=n / seconds)
        if peer.name == "fastq" and result["ok"]:  # fastq's own books must agree
            fastq_app.configure(redis_url=server.url)
            check_queue(fastq_app, "noop", n, f"fastq {workload}")
            fastq_app.close()
        return result
    finally:
        client.close()
        server.cleanup()


# -- reporting --------------------------------------------------------------------


def describe(workload: str, name: str, setup: Setup) -> str:
    """The table's "how" of a peer in a workload."""
    if workload in ("blast", "memory"):
        return PRODUCERS[name]
    if workload == "io":
        if name == "fastq" and setup.fastq_concurrency:
            c, flag = setup.fastq_concurrency, setup.fastq_async_flag
            if not flag:
                return f"async def jobs, pool -c {WORKERS} (fastq's own concurrency per child)"
            return f"{WORKERS * c} (async def jobs, pool -c {WORKERS} {flag} {c})"
        if name in ASYNC_PEERS and setup.io_concurrency:
            c = setup.io_concurrency
            return f"{WORKERS * c} ({c} x{WORKERS}, --io-concurrency)"
        return PEERS[name].io_how
    return PEERS[name].how


def rtt_over_drain(results: dict[str, dict[str, Any]]) -> None:
    """Each peer's rtt rate over its drain rate, in its rtt result (``vs_drain``)."""
    for r in results.values():
        drain_r, rtt_r = r.get("drain", {}), r.get("rtt", {})
        if drain_r.get("ok") and rtt_r.get("ok"):
            rtt_r["vs_drain"] = rtt_r["jobs_s"] / drain_r["jobs_s"]


def print_table(
    results: dict[str, dict[str, Any]], sizes: dict[str, int], setup: Setup
) -> dict[str, Any]:
    """One block per workload; returns fastq's ratio to the fastest peer per workload."""
    ratios: dict[str, Any] = {}
    titles = {
        "io": f"io, {setup.io_ms:g} ms per job",
        "rtt": f"rtt, {2 * setup.rtt_hold_ms:g} ms RTT through the proxy",
    }
    for workload in WORKLOADS:
        rows = [(name, r[workload]) for name, r in results.items() if workload in r]
        if not rows:
            continue
        print(f"\n{titles.get(workload, workload)} ({sizes[workload]:,} jobs)")
        how = {name: describe(workload, name, setup) for name, _ in rows}
        if workload == "rtt":
            for name, r in rows:
                if r.get("vs_drain"):
                    how[name] = f"rtt/drain {r['vs_drain']:.2f}"
        memory = workload == "memory"
        head = ("peer", "bytes/job" if memory else "jobs/s", "steady/s", "jobs", "runs", "dup")
        print("  {:<10}{:>10}{:>10}{:>9}{:>9}{:>6}  lost  how".format(*head))
        for name, r in sorted(rows, key=lambda x: _sort_key(workload, x[1])):
            figure = r.get("bytes_per_job" if memory else "jobs_s")
            speed = f"{figure:,.0f}" if figure else "—"
            steady = f"{r['steady_jobs_s']:,.0f}" if r.get("steady_jobs_s") else "—"
            flag = "" if r.get("ok") else "  FAILED: " + r.get("error", "count is not exactly N")
            print(
                f"  {name:<10}{speed:>10}{steady:>10}{r.get('jobs', 0):>9,}{r.get('runs', 0):>9,}"
                f"{r.get('duplicates', 0):>6}"
                f"{r.get('lost', 0):>6}  {how[name]}{flag}"
            )
        key = "bytes_per_job" if memory else "jobs_s"
        peers_ok = [(n, r[key]) for n, r in rows if n != "fastq" and r.get("ok")]
        fastq = results.get("fastq", {}).get(workload)
        if fastq and fastq.get("ok") and peers_ok:
            pick = min if memory else max  # the best peer: the smallest, or the fastest
            best_name, best = pick(peers_ok, key=lambda x: x[1])
            ratio = fastq[key] / best
            ratios[workload] = {"best_peer": best_name, "ratio": ratio}
            word = "smallest" if memory else "fastest"
            print(f"  fastq / {word} peer ({best_name}): {ratio:.2f}")
    return ratios


def _sort_key(workload: str, r: dict[str, Any]) -> float:
    """Best first: the fewest bytes per job, or the most jobs per second."""
    if workload == "memory":
        return r.get("bytes_per_job") or float("inf")
    return -(r.get("jobs_s") or 0)


# -- main -------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", help=f"comma-separated peers, of: {','.join(PEERS)}")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT_WORKLOADS),
        help=f"comma-separated, of: {','.join(WORKLOADS)} (default: all but memory, "
        "which drains 20,000 more jobs per peer: run it on its own)",
    )
    parser.add_argument("--drain-jobs", type=int)
    parser.add_argument("--io-jobs", type=int)
    parser.add_argument("--io-ms", type=float, default=5.0, help="the io job's sleep")
    parser.add_argument(
        "--io-concurrency",
        type=int,
        default=0,
        help="io jobs in flight per worker process for the async peers ("
        + ", ".join(ASYNC_PEERS)
        + ") and fastq's async def jobs (overrides --fastq-concurrency); default: "
        "each its own (issue 13's blast: --io-ms 20 --io-concurrency 200)",
    )
    parser.add_argument("--rtt-jobs", type=int, help="default: the drain's")
    parser.add_argument("--rtt-hold-ms", type=float, default=0.5, help="proxy hold, each way")
    parser.add_argument("--blast-jobs", type=int)
    parser.add_argument("--memory-jobs", type=int)
    parser.add_argument(
        "--fastq-async",
        choices=("auto", "on", "off"),
        default="auto",
        help="fastq's io jobs as async def (auto: when this fastq accepts async def "
        "jobs; off: sync jobs, one per child, 2 at a time)",
    )
    parser.add_argument(
        "--fastq-concurrency",
        type=int,
        default=FASTQ_CONCURRENCY,
        help="async io jobs per fastq child (passed to the pool option whose help "
        "speaks of async, found in `fastq pool --help`)",
    )
    parser.add_argument(
        "--fastq-async-flag",
        help="the fastq pool option for async jobs per child (default: found in its --help)",
    )
    parser.add_argument(
        "--cap",
        default=DEFAULT_CAP,
        help="at most this many jobs per workload for some peers, e.g. rq=3000 (a slow "
        f"peer; the table shows each run's size; default {DEFAULT_CAP}: RQ forks per job, "
        "'' for none)",
    )
    parser.add_argument("--json", help="where to write the JSON (default: bench/results/)")
    parser.add_argument("--no-chart", action="store_true")
    add_progress_option(parser)
    args = parser.parse_args(argv)
    configure_progress(args.progress)
    args.peers = args.only.split(",") if args.only else list(PEERS)
    unknown = [p for p in args.peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; known: {', '.join(PEERS)}")
    args.workloads = args.workloads.split(",")
    if set(args.workloads) - set(WORKLOADS):
        parser.error(f"workloads are {', '.join(WORKLOADS)}")
    args.caps = {k: int(v) for k, v in (c.split("=") for c in args.cap.split(",") if c)}
    args.drain_jobs = args.drain_jobs or (1_000 if args.quick else 20_000)
    args.io_jobs = args.io_jobs or (200 if args.quick else 2_000)
    args.rtt_jobs = args.rtt_jobs or args.drain_jobs
    args.blast_jobs = args.blast_jobs or (1_000 if args.quick else 30_000)
    args.memory_jobs = args.memory_jobs or (1_000 if args.quick else 20_000)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    sizes = {
        "drain": args.drain_jobs,
        "io": args.io_jobs,
        "rtt": args.rtt_jobs,
        "blast": args.blast_jobs,
        "memory": args.memory_jobs,
    }
    fastq_async, flag = False, ""
    if args.fastq_async != "off" and "io" in args.workloads and "fastq" in args.peers:
        fastq_async, flag = fastq_async_support()
        if args.fastq_async == "on" and not fastq_async:
            print("fastq takes no async def jobs here: the io workload runs sync jobs")
    flag = args.fastq_async_flag or flag
    fastq_concurrency = args.io_concurrency or args.fastq_concurrency
    setup = Setup(
        args.io_ms,
        args.rtt_hold_ms,
        fastq_concurrency if fastq_async else 0,
        flag,
        io_concurrency=args.io_concurrency,
    )
    started = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    source = source_state()  # the commit measured, as every benchmark's report has it
    with RedisServer() as server:
        machine = machine_info(redis.Redis.from_url(server.url))
    machine["machine"] = platform.machine()
    print(
        f"fastq peer harness — {date}, cpus: {machine['cpus']}, python: {machine['python']}, "
        f"redis-server: {machine['redis_server']}"
    )
    # fastq's own books, read as the driver's app (its namespace): check_queue's
    fastq_app = fastq.App("redis://127.0.0.1:1/0", namespace=FASTQ_NAMESPACE)

    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"fastq-peers-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    versions: dict[str, dict[str, str]] = {}
    failed = False
    for name in args.peers:
        peer = PEERS[name]
        print(f"{name}:", flush=True)
        try:
            versions[name] = ensure_installed(peer)
        except BenchFailure as exc:
            print(f"  not run: {exc}", file=sys.stderr)
            results[name] = {w: {"ok": False, "error": "install failed"} for w in args.workloads}
            failed = True
            continue
        results[name] = {}
        for workload in args.workloads:
            n = min(sizes[workload], args.caps.get(name, sizes[workload]))
            t_run = time.perf_counter()
            try:
                r = run_workload(peer, workload, n, log_dir, fastq_app, setup)
            except (BenchFailure, subprocess.SubprocessError, OSError, ValueError) as exc:
                r = {
                    "ok": False,
                    "jobs": n,
                    "error": str(exc).splitlines()[0][:200],
                    "detail": str(exc),
                }
            r["took_s"] = time.perf_counter() - t_run  # enqueue, drain, watch and stop
            results[name][workload] = r
            failed |= not r["ok"]
            speed = f"{r['jobs_s']:,.0f} jobs/s" if r.get("jobs_s") else "no figure"
            if r.get("bytes_per_job"):
                speed = f"{r['bytes_per_job']:,.0f} bytes/job"
            status = "ok" if r["ok"] else f"FAILED {r.get('error') or ''} {r.get('log_tail', '')}"
            counted = (
                f"runs {r.get('runs')}, duplicates {r.get('duplicates')}, lost {r.get('lost')}"
            )
            took = f"{r['took_s']:.0f} s"
            print(f"  {workload}: {speed}; {counted} ({took}) — {status}", flush=True)
    rtt_over_drain(results)
    ratios = print_table(results, sizes, setup)
    run_s = time.perf_counter() - started
    if failed:
        print(f"\n(run took {run_s:.0f} s; worker logs in {log_dir})")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
        print(f"\n(run took {run_s:.0f} s)")
    report = {
        "date": date,
        "source": source,
        "machine": machine,
        "options": {
            "quick": args.quick,
            "peers": args.peers,
            "workloads": args.workloads,
            "caps": args.caps,
            "drain_jobs": args.drain_jobs,
            "io_jobs": args.io_jobs,
            "io_ms": args.io_ms,
            "rtt_jobs": args.rtt_jobs,
            "rtt_hold_ms": args.rtt_hold_ms,
            "fastq_async_io": fastq_async,
            "fastq_concurrency": setup.fastq_concurrency or None,
            "io_concurrency": setup.io_concurrency or None,
            "fastq_async_flag": setup.fastq_async_flag or None,
            "blast_jobs": args.blast_jobs,
            "memory_jobs": args.memory_jobs,
            "workers": WORKERS,
        },
        "versions": versions,
        "how": {name: PEERS[name].how for name in args.peers},
        "io_how": {name: describe("io", name, setup) for name in args.peers},
        "producers": {name: PRODUCERS[name] for name in args.peers},
        "results": results,
        "fastq_vs_best_peer": ratios,
        "run_s": run_s,
    }
    stem = "peers-" + date.replace(":", "")
    json_path = Path(args.json) if args.json else RESULTS / f"{stem}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"JSON: {json_path}")
    if not args.no_chart:
        png = json_path.with_suffix(".png")
        skipped = draw_chart(report, png)
        print(f"chart: {skipped}" if skipped else f"chart: {png}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
