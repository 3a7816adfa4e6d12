"""The commands that run jobs: ``worker`` (one process), ``pool`` (a pre-forking
master), ``reaper``, and ``demo`` (a mailing blast on a throwaway Redis)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional

from fastq.app import App
from fastq.cli.common import (
    EXIT_APP_LOAD,
    CliError,
    add_connection_options,
    configured_app,
    log,
    parse_duration,
    parse_queues,
)
from fastq.errors import FastqError
from fastq.worker.options import MAX_BATCH, WorkerOptions

# the defaults of the worker's options: declared once, in WorkerOptions
DEFAULTS = WorkerOptions()

# async jobs in flight per worker process at most (each holds a record the master reads)
MAX_ASYNC_JOBS = 10_000
MAX_THREADS = 1_000


def whole_number(option: str, most: int) -> Callable[[str], int]:
    """The type of an option that takes a whole number within 1..``most``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise CliError(f"{option} must be a whole number, not {text!r}") from None
        if not 1 <= n <= most:
            raise CliError(f"{option} must be within 1..{most}, not {n}")
        return n

    return parse


batch_size = whole_number("--batch", MAX_BATCH)


def horizon_s(text: str) -> float:
    """The type of --burst-horizon: finite seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--burst-horizon must be a number of seconds, not {text!r}") from None
    if not 0 <= value < float("inf"):
        raise CliError(f"--burst-horizon must be finite seconds >= 0, not {text!r}")
    return value


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``512M``, ``1G``, ``300MB``, ``4096``: bytes."""
    raw = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = raw[-1:] if raw[-1:] in ("K", "M", "G") else ""
    try:
        value = float(raw[: len(raw) - len(unit)])
    except ValueError:
        raise CliError(f"invalid size {text!r}: use e.g. 512M or 2G") from None
    if value <= 0:
        raise CliError(f"size must be > 0, not {text!r}")
    return int(value * _SIZE_UNITS[unit])


def _served_queues(args: argparse.Namespace, app: App) -> list[str]:
    """``-q``'s queues, or without it every queue the app registers jobs on. An app
    that registers no job is refused; a queue that no registered job uses and that
    Redis does not know (a typo?) is warned about."""
    if not app.registry:
        raise CliError(
            f"app {args.app!r} registers no jobs: a worker would run nothing "
            "(are the @app.job modules imported by it?)",
            EXIT_APP_LOAD,
        )
    if args.queues is None:
        return app.job_queues()
    queues = parse_queues(args.queues)
    try:
        known = set(app.queues())
    except FastqError:
        return queues  # the worker itself waits for Redis and says so
    for q in queues:
        if q not in known:
            log.warning(
                "queue %r is unknown: no registered job uses it and nothing was ever "
                "enqueued on it (a typo? known: %s)",
                q,
                ", ".join(sorted(known)) or "none",
            )
    return queues


def worker_options(args: argparse.Namespace, **more: Any) -> WorkerOptions:
    """The options of ``fastq worker`` or of a ``fastq pool``'s children."""
    try:
        grace = args.unknown_job_grace
        return WorkerOptions(
            batch_size=args.batch,
            lease_s=args.lease,
            async_jobs=args.async_jobs,
            threads=args.threads,
            hand_back_after_s=args.hand_back_after,
            unknown_job_grace_s=None if grace is None else parse_duration(grace),
            **more,
        )
    except ValueError as exc:  # e.g. --lease 0
        raise CliError(str(exc)) from None


def cmd_worker(args: argparse.Namespace) -> int:
    from fastq.worker.worker import Worker

    if args.queues is not None:
        parse_queues(args.queues)  # a bad -q is refused before the app is imported
    app = configured_app(args)
    queues = _served_queues(args, app)
    options = worker_options(
        args,
        burst=args.burst,
        burst_horizon_s=args.burst_horizon,
        redis_patience_s=args.redis_patience,
    )
    Worker(app, queues, options).run()
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from fastq.pool.master import Master, PoolConfig

    if args.queues is not None:
        parse_queues(args.queues)  # a bad -q is refused before the app is imported
    if args.children < 1:
        raise CliError(f"-c must be >= 1, not {args.children}")
    app = configured_app(args)
    queues = _served_queues(args, app)
    memory = args.max_memory_per_child
    options = worker_options(
        args,
        max_jobs=args.max_jobs_per_child,
        max_memory_bytes=parse_size(memory) if memory else None,
    )
    config = PoolConfig(
        children=args.children,
        queues=queues,
        worker=options,
        child_timeout_s=args.child_timeout,
        graceful_timeout_s=args.graceful_timeout,
        reaper=not args.no_reaper,
        cpu_slots=args.cpu_slots if args.cpu_slots is not None else (os.cpu_count() or 1),
        queues_from_app=args.queues is None,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        reload_paths=_reload_paths(args.app) if args.reload else [],
        state_dir=args.state_dir,
    )
    try:
        master = Master(app, config, reload_app=lambda: configured_app(args, fresh=True))
    except RuntimeError as exc:  # --metrics-port without prometheus_client
        raise CliError(str(exc)) from None
    return master.run()


def _reload_paths(spec: str) -> list[str]:
    """What ``--reload`` watches: the current directory, and the folder of the app's
    top package or module when it lies elsewhere."""
    from fastq.pool.reload import require_watchfiles

    try:
        require_watchfiles()
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    paths = [os.getcwd()]
    module = sys.modules.get(spec.partition(":")[0].split(".")[0])
    where = getattr(module, "__file__", None)
    if where:
        folder = os.path.dirname(os.path.abspath(where))  # a package's own, or the module's
        if not folder.startswith(os.getcwd() + os.sep) and folder != os.getcwd():
            paths.append(folder)
    return paths


def cmd_reaper(args: argparse.Namespace) -> int:
    from fastq.connection.checks import check_redis
    from fastq.reaper.reaper import Reaper

    app = configured_app(args)
    queues = parse_queues(args.queues) if args.queues else None
    # a Redis that refuses it (password, protected mode) stops it with one line, as
    # a worker and a pool; a pool's reaper is checked by its master
    check_redis(app, "reaper")
    Reaper(app, queues, interval_s=args.interval).run()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fastq.cli.demo import run_demo

    # only an explicit --redis-url: without one the demo never touches an existing Redis
    return run_demo(redis_url=args.redis_url, jobs=args.jobs, batch=args.batch)


# -- parsers ------------------------------------------------------------------------


class _Deprecated(argparse.Action):
    """The old spelling of an option: sets what the new one sets, and leaves ``warning``
    in ``args.deprecated``, which ``main`` prints once the command line parsed."""

    def __init__(self, *args: Any, warning: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.warning = warning

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: Optional[str] = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.deprecated = [*getattr(namespace, "deprecated", []), self.warning]


def _add_in_flight_options(p: argparse.ArgumentParser, *, pool: bool) -> None:
    p.add_argument(
        "--async-jobs",
        type=whole_number("--async-jobs", MAX_ASYNC_JOBS),
        default=DEFAULTS.async_jobs,
        help="async def jobs in flight per worker process (default 1); sync jobs still run "
        "one at a time in the worker's thread (unless --threads)",
    )
    # --concurrency was --async-jobs until a Celery user read it as processes: it
    # keeps its meaning for a while, with a warning, rather than change it silently
    # (a `--concurrency 200` would then fork 200 processes)
    p.add_argument(
        "--concurrency",
        dest="async_jobs",
        type=whole_number("--concurrency", MAX_ASYNC_JOBS),
        action=_Deprecated,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        warning="--concurrency is deprecated: it sets the async def jobs in flight per worker "
        "process, use --async-jobs" + ("; -c/--children sets the processes" if pool else ""),
    )
    p.add_argument(
        "--threads",
        type=whole_number("--threads", MAX_THREADS),
        default=DEFAULTS.threads,
        help="run sync jobs in this many threads per worker process, as many in flight "
        "(default: one at a time in the worker's thread); a job past its timeout_s in a "
        "thread recycles its worker",
    )
    p.add_argument(
        "--hand-back-after",
        type=float,
        default=DEFAULTS.hand_back_after_s,
        metavar="SECONDS",
        help="once a sync job has run this long, the jobs claimed with it that wait "
        "behind it go back to the queue for other workers "
        f"(default {DEFAULTS.hand_back_after_s:g}; 0: never)",
    )


def _add_deploy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--unknown-job-grace",
        metavar="DURATION",
        help="how long a job of a name the app does not register (a newer deploy's) goes "
        "back to its queue, with a delay, before it is broken: e.g. 90s, 10m, 0 (default: "
        "the app's unknown_job_grace_s, 5m)",
    )


def add_worker(sub: Any) -> None:
    w = sub.add_parser(
        "worker",
        help="run one worker process",
        epilog="examples:\n  fastq worker --app myapp\n  fastq worker --app myapp -q mailer,default"
        "\n  fastq worker --app myapp:app -q mailer --burst --log-level DEBUG",
    )
    w.add_argument(
        "--app", required=True, help="module (or module:attr) whose import registers the jobs"
    )
    w.add_argument(
        "-q",
        "--queues",
        help="comma-separated queues, highest priority first "
        "(default: every queue the app registers jobs on)",
    )
    w.add_argument(
        "--batch",
        type=batch_size,
        default=DEFAULTS.batch_size,
        help="jobs claimed per round trip (1-1000); a worker of one queue may claim up to 10x "
        "this (at most 1,000) of quick jobs to cover the round trip to a distant Redis",
    )
    w.add_argument(
        "--burst",
        action="store_true",
        help="exit once the queues are empty and nothing is due within --burst-horizon",
    )
    w.add_argument(
        "--burst-horizon",
        type=horizon_s,
        default=DEFAULTS.burst_horizon_s,
        help="with --burst: seconds ahead to wait for a scheduled job (default 1)",
    )
    w.add_argument(
        "--lease", type=float, default=DEFAULTS.lease_s, help="seconds a claimed job stays leased"
    )
    _add_in_flight_options(w, pool=False)
    _add_deploy_options(w)
    w.add_argument(
        "--redis-patience",
        type=float,
        help="give up (exit 1) once Redis is unavailable this many seconds "
        "(default: 30 with --burst, else never)",
    )
    add_connection_options(w)
    w.set_defaults(func=cmd_worker)


def add_pool(sub: Any) -> None:
    p = sub.add_parser(
        "pool",
        help="a pre-forking master with N worker children and a reaper",
        epilog="examples:\n  fastq pool --app myapp -c 8\n"
        "  fastq pool --app myapp -c 32 -q mailer --max-memory-per-child 512M",
    )
    p.add_argument(
        "-c", "--children", type=int, default=os.cpu_count() or 1, help="worker children"
    )
    _add_in_flight_options(p, pool=True)
    _add_deploy_options(p)
    p.add_argument(
        "--app", required=True, help="module (or module:attr) whose import registers the jobs"
    )
    p.add_argument(
        "-q",
        "--queues",
        help="comma-separated queues, highest priority first "
        "(default: every queue the app registers jobs on)",
    )
    p.add_argument(
        "--batch",
        type=batch_size,
        default=DEFAULTS.batch_size,
        help="the most jobs a child claims per round trip (1-1000)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=DEFAULTS.lease_s,
        help="seconds a claimed job stays leased (extended while alive)",
    )
    p.add_argument(
        "--child-timeout", type=float, default=30.0, help="kill a child silent this many seconds"
    )
    p.add_argument(
        "--graceful-timeout", type=float, default=30.0, help="seconds a graceful stop may take"
    )
    p.add_argument(
        "--max-jobs-per-child", type=int, help="recycle a child after about this many jobs"
    )
    p.add_argument("--max-memory-per-child", help="recycle a child above this RSS, e.g. 512M")
    p.add_argument(
        "--max-stalls", type=int, help="a job whose child dies this many times more is dead"
    )
    p.add_argument(
        "--no-reaper",
        action="store_true",
        help="run no reaper child (run `fastq reaper` elsewhere)",
    )
    p.add_argument(
        "--reload",
        action="store_true",
        help="development: restart the children (a HUP) when a .py file under the "
        "current directory or the app's changes (the reload extra: watchfiles)",
    )
    p.add_argument(
        "--cpu-slots",
        type=int,
        help="children running CPU-bound batches at once (default: the CPU count; 0: no limit)",
    )
    p.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (/metrics)"
    )
    p.add_argument(
        "--metrics-host", default="127.0.0.1", help="the metrics' address (default: 127.0.0.1)"
    )
    p.add_argument(
        "--state-dir",
        help="where the pool keeps its children's heartbeat board, so that a pool "
        "started after this one was killed whole takes over what it held at once "
        "(default: $FASTQ_STATE_DIR, else /dev/shm; give a container a directory "
        "that outlives it)",
    )
    add_connection_options(p)
    p.set_defaults(func=cmd_pool)


def add_reaper(sub: Any) -> None:
    rp = sub.add_parser(
        "reaper",
        help="return expired leases, promote due jobs, trim dead sets",
        epilog="examples:\n  fastq reaper --app myapp\n"
        "  fastq reaper --app myapp -q mailer --interval 0.5",
    )
    rp.add_argument("--app", required=True, help="module (or module:attr) of the app")
    rp.add_argument("-q", "--queues", help="comma-separated queues (default: every known queue)")
    rp.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps at most")
    rp.add_argument("--max-stalls", type=int, help="a job stalled more often than this is dead")
    add_connection_options(rp)
    rp.set_defaults(func=cmd_reaper)


def add_demo(sub: Any) -> None:
    d = sub.add_parser(
        "demo",
        help="a mailing blast: enqueue 30,000 fake emails and drain them",
        epilog="examples:\n  fastq demo\n"
        "  fastq demo --jobs 100000\n  fastq demo --redis-url redis://127.0.0.1:6379/5",
    )
    d.add_argument("--redis-url", help="Redis to use (default: a throwaway redis-server)")
    d.add_argument("--jobs", type=int, default=30_000, help="emails to send")
    d.add_argument(
        "--batch", type=batch_size, default=DEFAULTS.batch_size, help="jobs claimed per round trip"
    )
    d.set_defaults(func=cmd_demo)


# each command's parser, by name (fastq.cli.main orders them)
COMMANDS: dict[str, Callable[[Any], None]] = {
    "worker": add_worker,
    "pool": add_pool,
    "reaper": add_reaper,
    "demo": add_demo,
}
