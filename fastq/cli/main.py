"""The ``fastq`` command. The only place that reads argv and the environment."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
import time
import traceback
from datetime import datetime, timezone
from typing import Any, Callable, NoReturn, Optional, Sequence

import orjson

from fastq._version import __version__
from fastq.app import DEFAULT_REDIS_URL, App
from fastq.connection.url import with_tls_files
from fastq.errors import FastqError
from fastq.logs import FORMATS, configure_logging
from fastq.protocol.introspect import JobInfo
from fastq.protocol.keys import validate_queue_name
from fastq.validate import parse_rate_limit

log = logging.getLogger("fastq.cli")

EXIT_USAGE = 2
EXIT_APP_LOAD = 3
# async jobs in flight per worker process at most (each holds a record the master reads)
MAX_CONCURRENCY = 10_000


class CliError(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """--help keeps the examples' line breaks and shows each option's default (one
    that means something: not None, not a flag's False, not one the help names)."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # one line, not argparse's usage block
        raise CliError(f"{message} (see `{self.prog} --help`)")


def concurrency(text: str) -> int:
    """The type of --concurrency: an int within 1..MAX_CONCURRENCY."""
    try:
        n = int(text)
    except ValueError:
        raise CliError(f"--concurrency must be a whole number, not {text!r}") from None
    if not 1 <= n <= MAX_CONCURRENCY:
        raise CliError(f"--concurrency must be within 1..{MAX_CONCURRENCY}, not {n}")
    return n


MAX_THREADS = 1_000


def threads(text: str) -> int:
    """The type of --threads: an int within 1..MAX_THREADS."""
    try:
        n = int(text)
    except ValueError:
        raise CliError(f"--threads must be a whole number, not {text!r}") from None
    if not 1 <= n <= MAX_THREADS:
        raise CliError(f"--threads must be within 1..{MAX_THREADS}, not {n}")
    return n


def batch_size(text: str) -> int:
    """The type of --batch: an int within 1..1000."""
    try:
        n = int(text)
    except ValueError:
        raise CliError(f"--batch must be a whole number, not {text!r}") from None
    if not 1 <= n <= 1000:
        raise CliError(f"--batch must be within 1..1000, not {n}")
    return n


def horizon_s(text: str) -> float:
    """The type of --burst-horizon: finite seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--burst-horizon must be a number of seconds, not {text!r}") from None
    if not 0 <= value < float("inf"):
        raise CliError(f"--burst-horizon must be finite seconds >= 0, not {text!r}")
    return value


def parse_queues(text: str) -> list[str]:
    queues = [q.strip() for q in text.split(",") if q.strip()]
    if not queues:
        raise CliError("no queue given: use -q NAME[,NAME...]")
    for q in queues:
        try:
            validate_queue_name(q)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    return queues


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
                "enqueued on it (a typo? known: %s)", q, ", ".join(sorted(known)) or "none",
            )  # fmt: skip
    return queues


def load_app(spec: str) -> App:
    """Import ``module`` or ``module:attribute`` and return its fastq App."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CliError(
                f"cannot import app module {module_name!r}: {exc}", EXIT_APP_LOAD
            ) from None
        raise CliError(f"importing {module_name!r} failed: {exc}", EXIT_APP_LOAD) from None
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CliError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc} "
            f"(at {frame.filename}, line {frame.lineno})",
            EXIT_APP_LOAD,
        ) from None
    if attr:
        app = getattr(module, attr, None)
        if not isinstance(app, App):
            raise CliError(f"{module_name}:{attr} is not a fastq.App", EXIT_APP_LOAD)
        return app
    apps = {id(v): v for v in vars(module).values() if isinstance(v, App)}
    if len(apps) != 1:
        found = "no fastq.App" if not apps else "several fastq.App objects"
        raise CliError(
            f"module {module_name!r} has {found}: name one as {module_name}:ATTR", EXIT_APP_LOAD
        )
    return next(iter(apps.values()))


def _configured_app(args: argparse.Namespace, *, fresh: bool = False) -> App:
    """The --app's App, pointed at --redis-url/$FASTQ_REDIS_URL and --namespace.

    ``fresh``: forget the app's modules first and import them again (a pool's
    SIGHUP picks up new code this way).
    """
    if fresh:
        top = args.app.partition(":")[0].split(".")[0]
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            if not name.startswith("fastq"):
                del sys.modules[name]
    app = load_app(args.app)
    url = args.redis_url or os.environ.get("FASTQ_REDIS_URL")
    try:
        tls = {k: getattr(args, f"tls_{k}", None) for k in ("ca_cert", "cert", "key")}
        if any(tls.values()):
            url = with_tls_files(url or app.redis_url, **tls)
        app.configure(redis_url=url, namespace=args.namespace)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if getattr(args, "max_stalls", None) is not None:
        app.max_stalls = args.max_stalls
    return app


def operator_app(args: argparse.Namespace) -> App:
    """The --app's App, or without one a bare App on --redis-url and --namespace: the
    operator commands act on Redis alone, the app only adds its registered jobs."""
    if getattr(args, "app", None):
        return _configured_app(args)
    url = args.redis_url or os.environ.get("FASTQ_REDIS_URL")
    try:
        tls = {k: getattr(args, f"tls_{k}", None) for k in ("ca_cert", "cert", "key")}
        if any(tls.values()):
            url = with_tls_files(url or DEFAULT_REDIS_URL, **tls)
        return App(url, namespace=args.namespace or "fastq")
    except ValueError as exc:
        raise CliError(str(exc)) from None


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


_OPTIONAL_APP = "module (or module:attr) of the app (optional: Redis alone is enough)"


def _add_connection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-url",
        help="Redis to use: redis://[[user]:password@]host:port/db, rediss:// (TLS), "
        "unix:///path.sock or redis+sentinel://host:port[,host:port...]/service_name/db "
        "(default: $FASTQ_REDIS_URL, else the app's); a password is "
        "safer in $FASTQ_REDIS_URL: a command line shows in `ps`",
    )
    p.add_argument("--namespace", help="key prefix (default: the app's, else fastq)")
    p.add_argument("--tls-ca-cert", help="rediss://: the CA certificate file that signed Redis'")
    p.add_argument("--tls-cert", help="rediss://: the client certificate file")
    p.add_argument("--tls-key", help="rediss://: the client certificate's key file")


def _add_concurrency_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--concurrency",
        type=concurrency,
        default=1,
        help="async def jobs in flight per worker process (default 1); sync jobs still run "
        "one at a time in the worker's thread (unless --threads)",
    )
    p.add_argument(
        "--threads",
        type=threads,
        default=0,
        help="run sync jobs in this many threads per worker process, as many in flight "
        "(default: one at a time in the worker's thread); a job past its timeout_s in a "
        "thread recycles its worker",
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from fastq.worker.worker import Worker

    if args.queues is not None:
        parse_queues(args.queues)  # a bad -q is refused before the app is imported
    app = _configured_app(args)
    queues = _served_queues(args, app)
    worker = Worker(
        app,
        queues,
        batch_size=args.batch,
        concurrency=args.concurrency,
        threads=args.threads,
        burst=args.burst,
        lease_s=args.lease,
        redis_patience_s=args.redis_patience,
        burst_horizon_s=args.burst_horizon,
    )
    worker.run()
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from fastq.pool.master import Master, PoolConfig

    if args.queues is not None:
        parse_queues(args.queues)  # a bad -q is refused before the app is imported
    if args.children < 1:
        raise CliError(f"-c must be >= 1, not {args.children}")
    app = _configured_app(args)
    queues = _served_queues(args, app)
    config = PoolConfig(
        concurrency=args.children,
        queues=queues,
        batch_size=args.batch,
        lease_s=args.lease,
        child_timeout_s=args.child_timeout,
        graceful_timeout_s=args.graceful_timeout,
        max_jobs_per_child=args.max_jobs_per_child,
        max_memory_per_child=parse_size(args.max_memory_per_child)
        if args.max_memory_per_child
        else None,
        reaper=not args.no_reaper,
        cpu_slots=args.cpu_slots if args.cpu_slots is not None else (os.cpu_count() or 1),
        queues_from_app=args.queues is None,
        in_flight=args.concurrency,
        threads=args.threads,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    try:
        master = Master(app, config, reload_app=lambda: _configured_app(args, fresh=True))
    except RuntimeError as exc:  # --metrics-port without prometheus_client
        raise CliError(str(exc)) from None
    return master.run()


def cmd_reaper(args: argparse.Namespace) -> int:
    from fastq.reaper.reaper import Reaper

    app = _configured_app(args)
    queues = parse_queues(args.queues) if args.queues else None
    Reaper(app, queues, interval_s=args.interval).run()
    return 0


def _one_queue(args: argparse.Namespace) -> str:
    """``-q``'s queue, for a command that acts on exactly one."""
    queues = parse_queues(args.queue)
    if len(queues) != 1:
        raise CliError(f"name one queue with -q, not {len(queues)}")
    return queues[0]


def _flow_call(fn: Callable[[str], object], queue: str) -> object:
    """Run ``fn(queue)``; an unknown queue is a one-line usage error."""
    try:
        return fn(queue)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def cmd_pause(args: argparse.Namespace) -> int:
    queue = _one_queue(args)
    _flow_call(operator_app(args).pause, queue)
    print(f"paused {queue}: workers claim nothing from it until `fastq resume -q {queue}`")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    queue = _one_queue(args)
    _flow_call(operator_app(args).resume, queue)
    print(f"resumed {queue}")
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """Show (no RATE), set or lift (``off``) a queue's rate limit. Bad input is refused
    before the app is imported, and nothing is written."""
    queue, text = args.queue, args.rate
    off = text is not None and text.strip().lower() == "off"
    if args.burst is not None and (text is None or off):
        raise CliError("--burst goes with a rate, e.g. `fastq limit ... QUEUE 600/m --burst 10`")
    try:
        validate_queue_name(queue)
        limit = parse_rate_limit(text, args.burst) if text is not None and not off else None
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None
    app = operator_app(args)
    if text is None:
        print(f"{queue}: {_flow_call(app.rate_limit, queue) or 'no rate limit'}")
        return 0
    if limit is None:
        _flow_call(lambda q: app.set_rate_limit(q, None), queue)
        print(f"{queue}: no rate limit")
        return 0
    _flow_call(
        lambda q: app.set_rate_limit(
            q, limit.rate, per_s=limit.period_ms / 1000, burst=limit.burst
        ),
        queue,
    )
    print(f"{queue}: at most {limit}, across every worker")
    return 0


_LIMIT_EPILOG = """\
examples:
  fastq limit mailer 14/s            at most 14 job starts a second
  fastq limit mailer 600/m --burst 10
  fastq limit reports 100/h
  fastq limit mailer                 show the limit
  fastq limit mailer off             lift it

The limit is global (every worker of every host), checked inside the claim: job
starts are spaced evenly, up to BURST at once after a quiet spell (default: the jobs
of 50 ms at the rate, at least 1). Retries count as starts; a pause still wins.
"""


def _confirm(prompt: str) -> bool:
    """Ask on the terminal; only ``y`` or ``yes`` confirms."""
    try:
        answer = input(f"{prompt} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_purge(args: argparse.Namespace) -> int:
    queue = _one_queue(args)
    what = ["ready", "scheduled"] + [name for name in ("dead", "broken") if getattr(args, name)]
    app = operator_app(args)
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(
                f"purge deletes jobs for good: confirm with --yes (stdin is not a terminal, "
                f"so fastq cannot ask); nothing was deleted from {queue}"
            )
        if not _confirm(f"delete every {', '.join(what)} job of queue {queue}?"):
            print("nothing deleted")
            return 1
    n = _flow_call(
        lambda q: app.purge(q, dead=args.dead, broken=args.broken),
        queue,
    )
    print(f"purged {n} jobs ({', '.join(what)}) from {queue}")
    return 0


_TIMES = ("enqueued_at", "due_at", "lease_until", "failed_at")


def _job_info_dict(info: JobInfo) -> dict[str, Any]:
    """A JobInfo as JSON can hold it: times stay Unix seconds, the raw payload is
    left out (its fields are shown)."""
    out = dataclasses.asdict(info)
    del out["raw"]
    return out


def _when(ts: Optional[float]) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def format_job_info(info: JobInfo) -> str:
    """A JobInfo for a person: one ``field  value`` line each, times in UTC (ISO
    8601), the traceback last."""
    fields = _job_info_dict(info)
    traceback = fields.pop("traceback")
    fraction, meta = fields.pop("progress"), fields.pop("progress_meta")
    rows = []
    for name, value in fields.items():
        if name in _TIMES:
            shown = _when(value)
        elif name in ("args", "kwargs"):
            shown = orjson.dumps(value).decode()
        else:
            shown = "-" if value is None else str(value)
        rows.append((name, shown))
    if fraction is not None:
        progress = f"{fraction:.0%}"
        if meta is not None:
            progress += " " + orjson.dumps(meta).decode()
        rows.append(("progress", progress))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name.ljust(width)}  {shown}" for name, shown in rows]
    if traceback:
        lines += ["traceback:", *("  " + line for line in traceback.rstrip().splitlines())]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    """What fastq knows of one job (``app.get_job``); an unknown id exits 1."""
    queue = _one_queue(args) if args.queue is not None else None
    app = operator_app(args)
    try:
        info = app.get_job(args.job_id, queue)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if info is None:
        where = f"queue {queue}" if queue else "any known queue"
        raise CliError(
            f"no job {args.job_id!r} in {where}: never enqueued, or completed "
            "(a completed job is deleted)",
            1,
        )
    if args.json:
        print(orjson.dumps(_job_info_dict(info), option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_job_info(info))
    return 0


def _one_or_all_queues(args: argparse.Namespace) -> Optional[str]:
    """``-q``'s one queue, or None (every known queue) without ``-q``."""
    return _one_queue(args) if args.queue is not None else None


def cmd_cancel(args: argparse.Namespace) -> int:
    if (args.job_id is None) == (args.tag is None):
        raise CliError("give a JOB_ID or --tag TAG (one of them)")
    app = operator_app(args)
    queue = _one_or_all_queues(args)
    try:
        if args.tag is not None:
            n = app.cancel_by_tag(args.tag, queue=queue)
            print(f"cancelled {n} jobs tagged {args.tag!r}")
            return 0
        if app.cancel(args.job_id, queue=queue):
            print(f"cancelled {args.job_id}")
            return 0
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None
    print(f"{args.job_id}: nothing to cancel (unknown, completed, dead, broken or cancelled)")
    return 1


def cmd_jobs(args: argparse.Namespace) -> int:
    """One line per live job tagged ``--tag``: id, queue, state."""
    app = operator_app(args)
    queue = _one_or_all_queues(args)
    cursor: Optional[str] = None
    while True:
        try:
            page = app.jobs_by_tag(args.tag, queue=queue, cursor=cursor, count=1000)
        except (TypeError, ValueError) as exc:
            raise CliError(str(exc)) from None
        for job in page.jobs:
            print(job.id, job.queue, job.state)
        if page.cursor is None:
            return 0
        cursor = page.cursor


def cmd_periodic(args: argparse.Namespace) -> int:
    """One line per periodic job: name, queue, schedule, overlap, last and next fire
    times (ISO 8601, in the schedule's zone), and the id of its last run."""
    from fastq.reaper.firer import last_fired

    app = _configured_app(args)
    if not app.schedules:
        print("no periodic jobs")
        return 0
    fired = last_fired(app)
    now_ms = int(time.time() * 1000)
    rows = [("NAME", "QUEUE", "SCHEDULE", "OVERLAP", "LAST FIRED", "NEXT FIRE", "LAST RUN")]
    for job in app.schedules.values():
        schedule = job.schedule
        last_ms, run_id = fired[job.name]
        if last_ms is None:
            last, upcoming = "never", schedule.next_after_ms(now_ms)
        else:
            last = schedule.local(last_ms).isoformat()
            # a slot missed while no reaper ran is fired as soon as one runs
            upcoming = schedule.next_after_ms(last_ms)
        nxt = schedule.local(upcoming).isoformat()
        if upcoming <= now_ms:
            nxt += " (missed: fires when a reaper runs)"
        overlap = "yes" if job.overlap else "no"
        rows.append((job.name, job.queue, schedule.describe(), overlap, last, nxt, run_id or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)), row[-1])
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fastq.cli.demo import run_demo

    # only an explicit --redis-url: without one the demo never touches an existing Redis
    return run_demo(redis_url=args.redis_url, jobs=args.jobs, batch=args.batch)


def cmd_lua(args: argparse.Namespace) -> int:
    """Print a script as fastq loads it (its includes resolved), for producers in
    other languages to SCRIPT LOAD and EVALSHA (docs/protocol.md)."""
    from fastq.protocol import contracts

    # byte for byte: a file of it loads under the SHA1 fastq itself uses
    sys.stdout.buffer.write(contracts.BY_NAME[args.script].script.source)
    return 0


def _add_lua_command(sub: Any) -> None:
    from fastq.protocol import contracts

    lu = sub.add_parser(
        "lua",
        help="print a Lua script with its includes resolved (see docs/protocol.md)",
        description="Print a script as fastq loads it, e.g. for a producer in another "
        'language:  redis-cli SCRIPT LOAD "$(fastq lua enqueue)"',
        epilog="examples:\n  fastq lua enqueue > enqueue.lua\n"
        '  redis-cli SCRIPT LOAD "$(fastq lua enqueue)"',
    )
    lu.add_argument("script", choices=contracts.NAMES, help="which script")
    lu.set_defaults(func=cmd_lua)


def build_parser() -> argparse.ArgumentParser:
    from fastq.cli import ops as cli_ops

    parser = _Parser(
        prog="fastq", description="fastq: a fast Redis-backed job queue", epilog=_MAIN_EPILOG
    )
    parser.add_argument("--version", action="version", version=f"fastq {__version__}")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument(
        "--log-format", default="text", choices=FORMATS, help="text, or json: one object a line"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    cli_ops.add_parsers(sub, _add_connection_options)

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
        default=100,
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
        default=1.0,
        help="with --burst: seconds ahead to wait for a scheduled job (default 1)",
    )
    w.add_argument("--lease", type=float, default=60.0, help="seconds a claimed job stays leased")
    _add_concurrency_option(w)
    w.add_argument(
        "--redis-patience",
        type=float,
        help="give up (exit 1) once Redis is unavailable this many seconds "
        "(default: 30 with --burst, else never)",
    )
    _add_connection_options(w)
    w.set_defaults(func=cmd_worker)

    p = sub.add_parser(
        "pool",
        help="a pre-forking master with N worker children and a reaper",
        epilog="examples:\n  fastq pool --app myapp -c 8\n"
        "  fastq pool --app myapp -c 32 -q mailer --max-memory-per-child 512M",
    )
    p.add_argument(
        "-c", "--children", type=int, default=os.cpu_count() or 1, help="worker children"
    )
    _add_concurrency_option(p)
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
        default=100,
        help="the most jobs a child claims per round trip (1-1000)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=60.0,
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
    _add_connection_options(p)
    p.set_defaults(func=cmd_pool)

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
    _add_connection_options(rp)
    rp.set_defaults(func=cmd_reaper)

    pa = sub.add_parser(
        "pause",
        help="stop workers claiming from a queue (jobs in hand finish)",
        epilog="examples:\n  fastq pause -q mailer\n  fastq pause -q mailer --namespace shop",
    )
    pa.set_defaults(func=cmd_pause)
    rs = sub.add_parser(
        "resume",
        help="let workers claim from a paused queue again, at once",
        epilog="examples:\n  fastq resume -q mailer",
    )
    rs.set_defaults(func=cmd_resume)
    pu = sub.add_parser(
        "purge",
        help="delete a queue's ready and scheduled jobs (never in flight)",
        epilog="examples:\n  fastq purge -q mailer\n  fastq purge -q mailer --dead --broken --yes",
    )
    pu.add_argument("--dead", action="store_true", help="delete its dead jobs too")
    pu.add_argument("--broken", action="store_true", help="delete its broken jobs too")
    pu.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    pu.set_defaults(func=cmd_purge)
    for flow_parser in (pa, rs, pu):
        flow_parser.add_argument("--app", help=_OPTIONAL_APP)
        flow_parser.add_argument("-q", "--queue", required=True, help="the queue")
        _add_connection_options(flow_parser)

    ins = sub.add_parser(
        "inspect",
        help="show one job: state, arguments, attempts, error",
        epilog="examples:\n  fastq inspect 4xYfQiT5ez0000\n"
        "  fastq inspect 4xYfQiT5ez0000 -q mailer --json",
    )
    ins.add_argument("job_id", help="the id enqueue returned")
    ins.add_argument("--app", help=_OPTIONAL_APP)
    ins.add_argument("-q", "--queue", help="the job's queue (default: look in every known queue)")
    ins.add_argument("--json", action="store_true", help="print JSON (times in Unix seconds)")
    _add_connection_options(ins)
    ins.set_defaults(func=cmd_inspect)
    li = sub.add_parser(
        "limit",
        help="show, set or lift a queue's global rate limit (e.g. 14/s)",
        epilog=_LIMIT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    li.add_argument("--app", help=_OPTIONAL_APP)
    li.add_argument("queue", help="the queue")
    li.add_argument("rate", nargs="?", help="JOBS/UNIT with UNIT s, m, h or d (e.g. 14/s), or off")
    li.add_argument("--burst", type=int, help="job starts allowed at once after a quiet spell")
    _add_connection_options(li)
    li.set_defaults(func=cmd_limit)
    ca = sub.add_parser(
        "cancel",
        help="cancel a job by id, or every job with a tag (--tag)",
        epilog="examples:\n  fastq cancel 4xYfQiT5ez0000\n"
        "  fastq cancel --tag campaign-42 -q mailer",
    )
    ca.add_argument("job_id", nargs="?", metavar="JOB_ID", help="the job to cancel")
    ca.add_argument("--tag", help="cancel every live job with this tag; prints how many")
    ca.set_defaults(func=cmd_cancel)
    jo = sub.add_parser(
        "jobs",
        help="list the live jobs with a tag: id, queue, state",
        epilog="examples:\n  fastq jobs --tag campaign-42\n"
        "  fastq jobs --tag campaign-42 -q mailer | wc -l",
    )
    jo.add_argument("--tag", required=True, help="the tag")
    jo.set_defaults(func=cmd_jobs)
    for tag_parser in (ca, jo):
        tag_parser.add_argument("--app", help=_OPTIONAL_APP)
        tag_parser.add_argument("-q", "--queue", help="the queue (default: every known queue)")
        _add_connection_options(tag_parser)

    pe = sub.add_parser(
        "periodic",
        help="list periodic jobs with their last and next fire times",
        epilog="examples:\n  fastq periodic --app myapp",
    )
    pe.add_argument("--app", required=True, help="module (or module:attr) of the app")
    _add_connection_options(pe)
    pe.set_defaults(func=cmd_periodic)

    d = sub.add_parser(
        "demo",
        help="a mailing blast: enqueue 30,000 fake emails and drain them",
        epilog="examples:\n  fastq demo\n"
        "  fastq demo --jobs 100000\n  fastq demo --redis-url redis://127.0.0.1:6379/5",
    )
    d.add_argument("--redis-url", help="Redis to use (default: a throwaway redis-server)")
    d.add_argument("--jobs", type=int, default=30_000, help="emails to send")
    d.add_argument("--batch", type=batch_size, default=100, help="jobs claimed per round trip")
    d.set_defaults(func=cmd_demo)
    _add_lua_command(sub)
    for command in sub.choices.values():
        # after the subcommand too; SUPPRESS: an absent one keeps the top-level value
        command.add_argument(
            "--log-level", default=argparse.SUPPRESS, help="DEBUG, INFO, WARNING or ERROR"
        )
    return parser


_MAIN_EPILOG = """\
examples:
  fastq pool --app myapp -c 8               run 8 worker children and a reaper
  fastq worker --app myapp -q mailer        one worker process on one queue
  fastq stats --watch                       counts and rates of every queue
  fastq wait -q mailer                      a progress bar until mailer is drained
  fastq dead list -q mailer                 jobs that failed for good
  fastq dead retry -q mailer                put them back, attempts reset
  fastq workers -v                          who holds which job now
  fastq enqueue send_email --args '["a@example.com"]' -q mailer
  fastq demo                                a 30,000-email blast on a throwaway Redis

Every command takes --redis-url (default: $FASTQ_REDIS_URL) and --namespace;
`fastq COMMAND --help` shows its options and examples.
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        try:
            configure_logging(args.log_level, args.log_format)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        return int(args.func(args))
    except CliError as exc:
        print(f"fastq: error: {exc}", file=sys.stderr)
        return exc.code
    except FastqError as exc:
        print(f"fastq: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
