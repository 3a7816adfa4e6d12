"""What the benchmarks share: the header of a run and its JSON report, forked children,
the bare baseline's producer, a ``fastq pool`` under test and its drains, the Redis
probe, which master of a cluster holds a queue, the RTT proxy as a process, and the
drain bar.

A benchmark runs from the repository's top as ``python -m bench.<name>``; the pools
it starts run there too (``--app bench.jobs.<name>``), never against the Redis on
port 6379: every server is a throwaway one the benchmark starts itself.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib.util
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional, Sequence

import orjson
import psutil
import redis
from redis.cluster import key_slot

import fastq
from bench.bare_consumer import QUEUE as BARE_QUEUE
from bench.bare_consumer import BareKeys
from bench.jobs import pool as pool_jobs
from fastq.cli.progress import CountView, Tally, make_view
from fastq.protocol.keys import QueueKeys
from fastq.testing.cluster_server import ClusterServer

ROOT = Path(__file__).resolve().parent.parent  # the repository's top: the pools' cwd
RESULTS = ROOT / "bench" / "results"  # where a run's JSON report goes by default
APP_SPEC = "bench.jobs.pool"  # the pool's app, unless a benchmark names another
POLL_S = 0.02  # how often a drain polls app.stats
WARM_SETTLE_S = 1.0  # a warm pool's children connected and idle before the blast
STAGE_PREFIX = "stage-"  # a warm drain's jobs wait in this namespace + the live one
ENQUEUE_PIPELINE = 1000  # bare enqueue: pipeline execute() every this many jobs


class BenchFailure(Exception):
    """A correctness check failed: the run is invalid, whatever its speed."""


# -- the header ----------------------------------------------------------------------


def machine_info(client: redis.Redis) -> dict[str, Any]:
    """What a benchmark ran on, for its header and its JSON report."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "fastq_accelerated": fastq.ACCELERATED,
        "redis_server": client.info("server")["redis_version"],
    }


def machine_header(title: str, machine: dict[str, Any]) -> str:
    return (
        f"{title} — cpus: {machine['cpus']}, python: {machine['python']}, "
        f"fastq.ACCELERATED: {machine['fastq_accelerated']}, "
        f"redis-server: {machine['redis_server']}"
    )


def source_state() -> dict[str, Any]:
    """The commit measured, and which files of the package differ from it (figures
    from a dirty tree belong to that tree, not to the commit)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "fastq", "fastq_ext"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": []}
    return {"commit": commit or None, "dirty": [line[3:] for line in status.splitlines()]}


def announce(client: redis.Redis, title: str, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Print a benchmark's header (the machine, then ``what`` is measured, then the
    files that differ from the commit measured); returns the machine and the source
    state, for its JSON report."""
    machine = machine_info(client)
    print(machine_header(title, machine))
    print(what)
    source = source_state()
    if source["dirty"]:
        print(f"note: uncommitted changes in {', '.join(source['dirty'])}")
    return machine, source


# -- the report -----------------------------------------------------------------------


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="where to write every figure (default: bench/results/<benchmark>-<UTC time>.json)",
    )


def write_report(report: dict[str, Any], benchmark: str, path: Optional[str] = None) -> Path:
    """Write a run's figures as JSON to ``path`` (``--json``), or else to
    ``bench/results/<benchmark>-<UTC time>.json``; say where on stdout.

    The report starts with the benchmark's name, the UTC ``date`` it was written and
    the ``source`` measured (the commit, and the files of the package that differ
    from it), unless the benchmark set them itself (``announce``'s, taken at the
    start): a figure quoted from the file carries its date and commit
    (``bench/docs_figures.py`` renders the docs' figures from them)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamped = {
        "benchmark": benchmark,
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": report.get("source") or source_state(),
        **report,
    }
    if path is None:
        out = RESULTS / f"{benchmark}-{now.strftime('%Y-%m-%dT%H%M%SZ')}.json"
    else:
        out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    out.write_bytes(orjson.dumps(stamped, option=options) + b"\n")
    print(f"JSON: {out}")
    return out


# -- forked children -------------------------------------------------------------------


def run_child(body: Callable[[], None]) -> int:
    """Fork; the child runs ``body`` and leaves with ``os._exit`` (never returning
    into the parent's code, whose ``finally`` blocks would stop the server)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    return pid


def wait_child(pid: int, what: str, timeout_s: Optional[float] = None) -> None:
    """Reap ``pid``; raise BenchFailure unless it exited with status 0."""
    if timeout_s is None:
        _, status = os.waitpid(pid, 0)
    else:
        deadline = time.monotonic() + timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise BenchFailure(f"{what}: child {pid} did not exit within {timeout_s}s")
            time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise BenchFailure(f"{what}: child exited with status {code}")


# -- the bare baseline's side of a drain (its consumer: bench/bare_consumer.py) -------


def bare_enqueue(client: redis.Redis, keys: BareKeys, n: int) -> float:
    """Pipelined ``HSET jobs id payload`` + ``LPUSH ready id`` of ``n`` jobs; seconds."""
    gc.collect()
    dumps = orjson.dumps
    t0 = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        job_id = str(i)
        payload = dumps(
            {"id": job_id, "name": "noop", "args": [i], "kwargs": {}, "queue": BARE_QUEUE}
        )
        pipe.hset(keys.jobs, job_id, payload)
        pipe.lpush(keys.ready, job_id)
        if (i + 1) % ENQUEUE_PIPELINE == 0:
            pipe.execute()
    pipe.execute()
    elapsed = time.perf_counter() - t0
    if client.llen(keys.ready) != n or client.hlen(keys.jobs) != n:
        raise BenchFailure("bare enqueue: the queue does not hold every job")
    return elapsed


def check_bare_drained(url: str, keys: BareKeys, what: str) -> None:
    """Raise BenchFailure unless the bare queue's keys are all empty."""
    check = redis.Redis.from_url(url)
    left = (check.llen(keys.ready), check.zcard(keys.inflight), check.hlen(keys.jobs))
    check.close()
    if left != (0, 0, 0):
        raise BenchFailure(f"{what}: ready, inflight, jobs left = {left}, expected none")


# -- a pool under test -----------------------------------------------------------------

# set from the command line: e2e_pool's --metrics, and --records-max-len (the drained
# queue's records_max_len in its settings; 0: no records; None: the default)
POOL_OPTIONS: dict[str, Any] = {"metrics": False, "records_max_len": None}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(url: str) -> dict[str, str]:
    """The environment of a pool or worker under test: its Redis from
    ``FASTQ_REDIS_URL``, as deployed, and the repository's top importable."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "FASTQ_REDIS_URL": url, "PYTHONPATH": path}


class Pool:
    """``python -m fastq pool`` as a subprocess, its output kept in a temp file.

    ``batch`` None leaves the claim size to the pool's sizer; ``options`` are more
    pool options (``--async-jobs 200``)."""

    def __init__(
        self,
        url: str,
        namespace: str,
        queue: str,
        concurrency: int,
        batch: Optional[int] = None,
        *,
        app: str = APP_SPEC,
        options: Sequence[str] = (),
    ) -> None:
        self.concurrency = concurrency
        self.cmd = [
            sys.executable,
            "-m",
            "fastq",
            "--log-level",
            "WARNING",
            "pool",
            "-c",
            str(concurrency),
            "--app",
            app,
            "--namespace",
            namespace,
            "-q",
            queue,
        ]
        if batch is not None:
            self.cmd += ["--batch", str(batch)]
        self.cmd += list(options)
        if POOL_OPTIONS["metrics"]:  # --metrics: each pool serves /metrics on a free port
            self.cmd += ["--metrics-port", str(free_port())]
        self.env = child_env(url)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.log: Optional[IO[bytes]] = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Pool:
        # kept open for the pool's lifetime, closed by cleanup()
        self.log = tempfile.TemporaryFile(prefix="fastq-bench-pool-")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.cmd, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )
        return self

    def output(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def check_alive(self, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BenchFailure(
                f"{what}: the pool exited early with status {self.proc.returncode}:\n"
                f"{self.output()[-3000:]}"
            )

    def workers(self, timeout_s: float = 30.0) -> list[psutil.Process]:
        """The worker children (not the reaper), once all ``concurrency`` are up,
        oldest first."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive("pool start")
            found = []
            for child in psutil.Process(self.pid).children():
                try:
                    if _child_kind(child) == "worker":
                        found.append(child)
                except psutil.NoSuchProcess:
                    continue
            if len(found) == self.concurrency:
                return sorted(found, key=lambda p: (p.create_time(), p.pid))
            if time.monotonic() > deadline:
                raise BenchFailure(
                    f"pool start: {len(found)} of {self.concurrency} workers up after {timeout_s}s"
                )
            time.sleep(0.01)

    def cpu_s(self) -> float:
        """CPU seconds used so far by the master and its live children."""
        total = 0.0
        master = psutil.Process(self.pid)
        for proc in [master, *master.children()]:
            try:
                t = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total

    def stop(self, what: str, timeout_s: float = 45.0) -> float:
        """SIGTERM (graceful stop); the pool must exit 0. Returns seconds it took."""
        assert self.proc is not None
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise BenchFailure(f"{what}: the pool did not stop within {timeout_s}s") from None
        if code != 0:
            raise BenchFailure(
                f"{what}: the pool exited with status {code} on SIGTERM:\n{self.output()[-3000:]}"
            )
        return time.perf_counter() - t0

    def cleanup(self) -> None:
        """After a failure: stop the pool whatever state it is in, children included."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                children = psutil.Process(self.proc.pid).children()
            except psutil.NoSuchProcess:
                children = []
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            # a child that outlived its master (a reaper does not watch for that)
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
        if self.log is not None:
            self.log.close()
            self.log = None


def _child_kind(proc: psutil.Process) -> str:
    """``worker`` or ``reaper``: by the process name the master sets, or else by
    threads (a worker runs a heartbeat thread; the reaper runs none)."""
    name = proc.name()
    if name.startswith("fastq-"):
        return name[len("fastq-") :]
    return "worker" if proc.num_threads() >= 2 else "reaper"


class Probe:
    """Redis-side figures around a scenario: Redis CPU and EVALSHA calls."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.cpu0, self.evalsha0 = self._read()

    def _read(self) -> tuple[float, int]:
        cpu = self.client.info("cpu")
        calls = self.client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), int(calls)

    def delta(self) -> tuple[float, int]:
        cpu, calls = self._read()
        return cpu - self.cpu0, calls - self.evalsha0


# -- drains ----------------------------------------------------------------------------


def check_queue(
    app: fastq.App, queue: str, n: int, what: str, *, allow_redelivery: bool = False
) -> dict[str, int]:
    """Every job ran and was counted once; nothing is left ready or in flight."""
    stats = app.stats(queue)
    bad = {"failed", "retried", "total_dead", "total_broken", "dead", "broken", "scheduled"}
    if not allow_redelivery:
        bad |= {"stalled", "orphaned"}
    problems = {k: stats[k] for k in sorted(bad) if stats.get(k)}
    if (stats["processed"], stats["ready"], stats["inflight"]) != (n, 0, 0) or problems:
        raise BenchFailure(
            f"{what}: expected processed={n}, ready=0, inflight=0 and no failures; "
            f"stats say {stats}"
        )
    return stats


def fresh_app(client: redis.Redis, url: str, namespace: str) -> fastq.App:
    """The bench's copy of the pool's app (``bench.jobs.pool``), pointed at the
    throwaway server, which is emptied first."""
    client.flushdb()
    app = pool_jobs.app
    app.configure(redis_url=url, namespace=namespace)
    app.redis.ping()
    return app


# Moves a staged queue's jobs under a running pool in one atomic call, so that a
# whole blast appears at once: renames the staged job hash and ready list onto the
# live (empty) queue's, adds the staged counters, and leaves a wake-up token.
PUBLISH_LUA = """
if redis.call('EXISTS', KEYS[4], KEYS[5]) > 0 then
    return redis.error_reply('the live queue is not empty')
end
redis.call('RENAME', KEYS[1], KEYS[4])
redis.call('RENAME', KEYS[2], KEYS[5])
local counters = redis.call('HGETALL', KEYS[3])
for i = 1, #counters, 2 do
    redis.call('HINCRBY', KEYS[6], counters[i], counters[i + 1])
end
redis.call('DEL', KEYS[3])
if redis.call('LLEN', KEYS[7]) == 0 then
    redis.call('RPUSH', KEYS[7], 1)
end
return 1
"""


def queue_jobs(client: redis.Redis, url: str, namespace: str, job: Any, n: int) -> fastq.App:
    """A fresh app on ``namespace`` with ``n`` of ``job`` queued, checked."""
    app = fresh_app(client, url, namespace)
    job.enqueue_many([(i,) for i in range(n)])
    if app.stats(job.queue)["ready"] != n:
        raise BenchFailure(f"{namespace}: enqueue_many did not queue {n} jobs")
    return app


def stage_jobs(client: redis.Redis, url: str, namespace: str, job: Any, n: int) -> fastq.App:
    """Queue ``n`` jobs in ``namespace``'s staging namespace, ready for
    ``publish_staged``; returns the app pointed back at ``namespace``."""
    app = queue_jobs(client, url, STAGE_PREFIX + namespace, job, n)
    app.configure(namespace=namespace)
    return app


def publish_staged(client: redis.Redis, app: fastq.App, queue: str) -> None:
    staged, live = QueueKeys(STAGE_PREFIX + app.namespace, queue), app.keys(queue)
    keys = [staged.jobs, staged.ready, staged.stats, live.jobs, live.ready, live.stats, live.wake]
    client.eval(PUBLISH_LUA, len(keys), *keys)


def poll_drained(
    app: fastq.App, queue: str, n: int, pool: Pool, label: str, t0: float, shown: Any
) -> tuple[float, int, float]:
    """Poll ``queue``'s stats every POLL_S from ``t0`` (feeding the drain bar
    ``shown``) until ``n`` jobs are processed; a dead pool or ``60 + n / 500`` s
    without the drain raise. Returns the time of the first poll that saw a job
    processed, the count it saw, and the time of the last poll."""
    timeout_s = 60 + n / 500
    first_t, first_done = 0.0, 0
    next_poll = t0
    while True:
        stats = app.stats(queue)
        done = stats["processed"]
        now = time.perf_counter()
        shown.update(done, stats["failed"], stats["total_dead"], final=done >= n)
        if done and not first_t:
            first_t, first_done = now, done
        if done >= n:
            return first_t, first_done, now
        if now - t0 > timeout_s:
            raise BenchFailure(f"{label}: {done} of {n} jobs processed after {timeout_s}s")
        pool.check_alive(label)
        next_poll += POLL_S
        time.sleep(max(0.0, next_poll - time.perf_counter()))


def pool_drain(
    client: redis.Redis,
    url: str,
    namespace: str,
    job: Any,
    n: int,
    concurrency: int,
    batch: int,
    warm: bool = False,
) -> dict[str, Any]:
    """Time a pool draining ``n`` jobs until stats count them all processed.

    Cold: the jobs are enqueued first and the clock starts with the pool's launch
    (interpreter, import, forks included). Warm: the pool is up and idle, every
    child waiting for work, when the whole blast appears at once (``PUBLISH_LUA``);
    the clock starts then, as it does for a blast on a deployed pool.
    """
    queue = job.queue
    app = (stage_jobs if warm else queue_jobs)(client, url, namespace, job, n)
    if POOL_OPTIONS["records_max_len"] is not None:
        client.hset(app.keys(queue).settings, "records_max_len", POOL_OPTIONS["records_max_len"])
    pool = Pool(url, namespace, queue, concurrency, batch)
    try:
        pool.start()
        cpu0 = 0.0
        if warm:
            pool.workers()
            time.sleep(WARM_SETTLE_S)
            cpu0 = pool.cpu_s()
        # opened before the clock starts, fed by the poll the timing needs anyway
        with drain_bar(namespace, n) as shown:
            probe = Probe(client)
            t0 = time.perf_counter()
            if warm:
                publish_staged(client, app, queue)
            first_t, first_done, now = poll_drained(app, queue, n, pool, namespace, t0, shown)
            wall = now - t0
            pool_cpu = pool.cpu_s() - cpu0
            redis_cpu, evalsha = probe.delta()
        stop_s = pool.stop(namespace)
    finally:
        pool.cleanup()
    check_queue(app, queue, n, namespace)
    window = now - first_t
    steady = (n - first_done) / window if window > 0 else None
    return {
        "jobs": n,
        "concurrency": concurrency,
        "warm": warm,
        "wall_s": wall,
        "jobs_s": n / wall,
        "first_seen_s": first_t - t0,  # start to the first poll that saw a job processed
        "first_to_last_s": window,
        "steady_jobs_s": steady,  # jobs counted after that poll, over that window
        "pool_cpu_us_per_job": pool_cpu / n * 1e6,  # cold: start-up included
        "redis_cpu_us_per_job": redis_cpu / n * 1e6,
        "redis_cores": redis_cpu / wall,  # how busy Redis was, in cores
        "evalsha_per_100_jobs": evalsha / n * 100,
        "stop_s": stop_s,
    }


# -- a Redis Cluster: which master holds a queue, as the cluster itself says -----------


def master_of(cluster: ClusterServer) -> Callable[[str], int]:
    """The port of the master of a queue's slot, by ``CLUSTER SLOTS`` (read once)."""
    node = cluster.client(cluster.ports[0])
    try:
        ranges = node.execute_command("CLUSTER", "SLOTS")  # the raw reply, not redis-py's dict
    finally:
        node.close()
    owners = [(int(r[0]), int(r[1]), int(r[2][1])) for r in ranges]

    def master(queue: str) -> int:
        slot = key_slot(f"{{{queue}}}".encode())
        return next(p for lo, hi, p in owners if lo <= slot <= hi)

    return master


def queues_on_masters(cluster: ClusterServer, k: int, prefix: str = "q") -> dict[int, str]:
    """``k`` queue names (``prefix`` and a number), each on a different master: the
    port of its master -> the name."""
    master = master_of(cluster)
    found: dict[int, str] = {}
    i = 0
    while len(found) < k:
        found.setdefault(master(f"{prefix}{i}"), f"{prefix}{i}")
        i += 1
    return found


# -- the RTT proxy (bench/rtt_proxy.py) as a process of its own ------------------------


class Proxy:
    """``python -m bench.rtt_proxy`` in front of a Redis on ``upstream_port``,
    holding every chunk ``delay_ms`` each way."""

    def __init__(self, upstream_port: int, delay_ms: float) -> None:
        self.delay_ms = delay_ms
        self.stats_path = Path(tempfile.mkstemp(prefix="fastq-rtt-", suffix=".json")[1])
        cmd = [
            sys.executable,
            "-m",
            "bench.rtt_proxy",
            "--upstream",
            f"127.0.0.1:{upstream_port}",
            "--delay-ms",
            str(delay_ms),
            "--stats",
            str(self.stats_path),
        ]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.proc.kill()
            raise BenchFailure(f"the RTT proxy did not start: {line!r}")
        self.port = int(line.split()[1])

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> dict[str, Any]:
        """Stop it; what it held chunks for, really."""
        self.proc.terminate()
        self.proc.wait(timeout=10)
        try:
            stats: dict[str, Any] = orjson.loads(self.stats_path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            stats = {}
        self.stats_path.unlink(missing_ok=True)
        return stats


# -- the drain bar: ``fastq wait``'s view (``fastq.cli.progress``) on stderr -----------
#
# A drain's timing loop feeds it the counts it already reads, so that the bar adds no
# Redis round trip to the measured drain; a drain without such a loop gets
# ``polled_drain_bar``: one read every 0.5 s on a connection of its own, and only
# while a bar is shown. Shown when stderr is a terminal and rich is installed;
# ``--progress`` forces it (plain lines without rich or a terminal), ``--no-progress``
# hides it. Stdout and the JSON reports are the same either way.

POLLED_EVERY_S = 0.5

# None: when stderr is a terminal and rich is installed; set by configure_progress()
PROGRESS: dict[str, Optional[bool]] = {"shown": None}


class _NoView:
    """The view when no bar is shown."""

    def update(self, t: Tally, rate: float, final: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a live bar on stderr while each drain runs (default: when stderr is a "
        "terminal and rich is installed)",
    )


def configure_progress(progress: Optional[bool]) -> None:
    """``--progress`` (True), ``--no-progress`` (False), or neither (None)."""
    PROGRESS["shown"] = progress


def progress_shown() -> bool:
    forced = PROGRESS["shown"]
    if forced is not None:
        return forced
    return sys.stderr.isatty() and importlib.util.find_spec("rich") is not None


def drain_bar(label: str, total: int) -> CountView:
    """A bar for a drain of ``total`` jobs; feed it ``update(done, ...)``."""
    view: Any = make_view(label, sys.stderr) if progress_shown() else _NoView()
    return CountView(view, total)


@contextlib.contextmanager
def polled_drain_bar(label: str, total: int, read_done: Callable[[], int]) -> Iterator[None]:
    """A bar fed by ``read_done`` every ``POLLED_EVERY_S`` from a thread, for a drain
    whose timing loop reads no count (it waits on its processes). ``read_done``
    must use a connection of its own. No thread and no read without a bar."""
    if not progress_shown():
        yield
        return
    stop = threading.Event()
    with drain_bar(label, total) as shown:

        def poll() -> None:
            while not stop.is_set():
                try:
                    shown.update(read_done())
                except Exception:  # noqa: BLE001  (a bar that cannot read stops; the run goes on)
                    return
                stop.wait(POLLED_EVERY_S)

        thread = threading.Thread(target=poll, name="drain-bar", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        with contextlib.suppress(Exception):  # the drain is over; the bar shows where it ended
            shown.update(read_done(), final=True)
