"""The operator commands of ``fastq``: stats, queues, dead, broken, enqueue, wait.

They need no ``--app`` (a bare App on ``--redis-url`` / ``$FASTQ_REDIS_URL`` and
``--namespace`` is enough); with one, its registered jobs and queues are known too.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any, Optional

import orjson

from fastq.app import App
from fastq.cli.main import (
    _OPTIONAL_APP,
    CliError,
    _job_info_dict,
    _one_queue,
    format_job_info,
    operator_app,
    parse_queues,
)
from fastq.cli.progress import make_view, watch_drain
from fastq.protocol.introspect import JobInfo
from fastq.protocol.keys import validate_queue_name
from fastq.validate import RateLimit

STATS_FIELDS = ("ready", "inflight", "scheduled", "dead", "broken", "processed", "failed")


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``; a bad or unknown queue, id or limit is a one-line usage error."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _stats_queues(args: argparse.Namespace, app: App) -> list[str]:
    known = app.queues()
    if not args.queues:
        return [q for q in known if _valid(q)]
    queues = parse_queues(args.queues)
    unknown = [q for q in queues if q not in known]
    if unknown:
        raise CliError(f"unknown queue {unknown[0]!r} (known: {', '.join(known) or 'none'})")
    return queues


def _valid(queue: str) -> bool:
    try:
        validate_queue_name(queue)
    except (TypeError, ValueError):
        return False
    return True


def _stats_row(counts: dict[str, int], rate: Optional[float]) -> dict[str, Any]:
    row: dict[str, Any] = {f: counts[f] for f in STATS_FIELDS}
    row["rate"] = None if rate is None else round(rate, 1)
    limit = counts["rate"]
    row["limit"] = (
        str(RateLimit(limit, counts["rate_period_ms"], counts["rate_burst"])).replace(" ", "")
        if limit
        else None
    )
    row["paused"] = bool(counts["paused"])
    if counts.get("shards", 1) > 1:  # a sharded queue's counts are its shards' sums
        row["shards"] = counts["shards"]
    return row


def _print_stats(rows: dict[str, dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(orjson.dumps(rows).decode(), flush=True)
        return
    for q, row in rows.items():
        shown = " ".join(f"{f}={row[f]}" for f in STATS_FIELDS)
        rate = "-" if row["rate"] is None else f"{row['rate']:g}/s"
        flags = " paused" if row["paused"] else ""
        if "shards" in row:
            flags += f" shards={row['shards']}"
        print(f"{q} {shown} rate={rate} limit={row['limit'] or 'off'}{flags}", flush=True)


def cmd_stats(args: argparse.Namespace) -> int:
    """Per queue: ready, inflight, scheduled, dead, broken, processed, failed, and
    (with --watch) the rate: jobs processed per second over the last interval."""
    if args.interval <= 0:
        raise CliError(f"--interval must be > 0 seconds, not {args.interval:g}")
    app = operator_app(args)
    queues = _stats_queues(args, app)
    if not queues and not args.json:
        print("no queues")
        return 0
    before: dict[str, dict[str, int]] = {}
    t_before = 0.0
    while True:
        now = time.monotonic()
        counts = {q: app.stats(q) for q in queues}
        rows = {}
        for q, c in counts.items():
            rate = None
            if q in before:
                rate = (c["processed"] - before[q]["processed"]) / max(now - t_before, 1e-9)
            rows[q] = _stats_row(c, rate)
        if args.watch and not args.json and sys.stdout.isatty():
            print("\x1b[2J\x1b[H", end="")  # clear the screen: a table that stays put
        _print_stats(rows, args.json)
        if not args.watch:
            return 0
        before, t_before = counts, now
        time.sleep(args.interval)


def cmd_queues(args: argparse.Namespace) -> int:
    """Every queue the namespace knows (and the app registers), with its depth;
    a name that is not a valid queue name is listed as such."""
    app = operator_app(args)
    registered = {job.queue for job in app.registry.values()}
    known = app.queues()
    if not known:
        print("no queues")
        return 0
    for q in known:
        if not _valid(q):
            print(f"{q!r} invalid queue name (written by something other than fastq)")
            continue
        c = app.stats(q)
        note = " (registered by the app)" if q in registered else ""
        state = " paused" if c["paused"] else ""
        if c.get("shards", 1) > 1:  # one line for the queue, not one per shard
            state += f" shards={c['shards']}"
        print(
            f"{q} ready={c['ready']} inflight={c['inflight']} scheduled={c['scheduled']} "
            f"dead={c['dead']} broken={c['broken']}{state}{note}"
        )
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    """One line per worker holding jobs now: queue, worker id, jobs held, when its
    lease lapses; with -v the jobs (id and name)."""
    app = operator_app(args)
    queue = _one_queue(args) if args.queue else None
    found = _call(app.holders, queue)
    if args.json:
        print(orjson.dumps([dataclasses.asdict(h) for h in found]).decode())
        return 0
    if not found:
        print("no worker holds a job now (idle workers hold none and are not listed)")
        return 0
    now = time.time()
    for h in found:
        print(f"{h.queue} {h.worker} jobs={len(h.jobs)} lease={h.lease_until - now:+.1f}s")
        if args.verbose:
            for job_id, name in h.jobs.items():
                print(f"  {job_id} {name or '-'}")
    return 0


def _print_jobs(jobs: list[JobInfo], as_json: bool, what: str, queue: str) -> None:
    if as_json:
        print(orjson.dumps([_job_info_dict(j) for j in jobs]).decode())
        return
    if not jobs:
        print(f"no {what} jobs in {queue}")
        return
    for job in jobs:
        why = job.broken_reason if what == "broken" else job.last_error
        print(f"{job.id} {job.name or '-'} attempts={job.attempts} {why or '-'}")


def _section_command(args: argparse.Namespace, what: str) -> int:
    queue = _one_queue(args)
    app = operator_app(args)
    if args.action == "list":
        lister = app.dead_jobs if what == "dead" else app.broken_jobs
        jobs = _call(lister, queue, args.limit or 50)
        if args.verbose and not args.json:
            print("\n\n".join(format_job_info(j) for j in jobs) or f"no {what} jobs in {queue}")
        else:
            _print_jobs(jobs, args.json, what, queue)
        return 0
    if args.action == "retry":
        if what == "dead":
            n = _call(app.retry_dead, queue, args.limit)
            print(f"put {n} dead jobs back in {queue}, attempts reset")
            return 0
        n, skipped = _call(app.retry_broken, queue, args.limit)
        print(f"put {n} broken jobs back in {queue}")
        if skipped:
            print(
                f"{skipped} broken jobs have no payload and cannot run again "
                f"(`fastq broken purge -q {queue} --yes` deletes them)"
            )
        return 0
    # purge
    if args.limit is not None:
        raise CliError("--limit goes with list and retry; purge deletes every one")
    if not args.yes:
        raise CliError(f"purge deletes every {what} job of {queue} for good: confirm with --yes")
    n = _call(
        app.purge, queue, ready=False, scheduled=False, dead=what == "dead",
        broken=what == "broken",
    )  # fmt: skip
    print(f"purged {n} {what} jobs from {queue}")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    return _section_command(args, "dead")


def cmd_broken(args: argparse.Namespace) -> int:
    return _section_command(args, "broken")


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``2h``, ``1d``, ``250ms`` or plain seconds: seconds."""
    raw = text.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if raw.endswith(u)), "")
    try:
        value = float(raw[: len(raw) - len(unit)]) * _DURATION_UNITS.get(unit, 1.0)
    except ValueError:
        raise CliError(f"invalid duration {text!r}: use e.g. 30s, 5m, 2h or 1d") from None
    if not 0 <= value < float("inf"):
        raise CliError(f"a duration must be finite and >= 0, not {text!r}")
    return value


def _json_arg(text: str, option: str, kind: type) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CliError(f"{option} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, kind):
        want = "a JSON array, e.g. '[1, 2]'" if kind is list else "a JSON object, e.g. '{\"k\": 1}'"
        raise CliError(f"{option} must be {want}, not {text!r}")
    return value


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Enqueue one job by name; prints its id. Bad JSON, an unknown queue or (with
    --app) an unknown job name are refused before anything is written."""
    job_args = _json_arg(args.args, "--args", list)
    kwargs = _json_arg(args.kwargs, "--kwargs", dict)
    delay_s = parse_duration(args.delay) if args.delay is not None else 0.0
    app = operator_app(args)
    job = app.registry.get(args.name)
    if args.app and job is None:
        known = ", ".join(sorted(app.registry)) or "none"
        raise CliError(f"unknown job {args.name!r}: the app registers {known}")
    queue = _one_queue(args) if args.queue else (job.queue if job else "default")
    if queue not in app.queues() and not args.new_queue:
        raise CliError(
            f"unknown queue {queue!r}: no job was enqueued on it and no job of the app "
            "uses it (add --new-queue to start it)"
        )
    if args.new_queue:
        app.declare_queue(queue)
    job_id = _call(
        app.enqueue, args.name, job_args, kwargs, queue=queue, job_id=args.id,
        priority=args.priority, delay_s=delay_s,
    )  # fmt: skip
    print(job_id)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    """A live progress bar until the queue is drained: exit 0 then, 1 on --timeout."""
    queue = _one_queue(args)
    if args.interval <= 0:
        raise CliError(f"--interval must be > 0 seconds, not {args.interval:g}")
    timeout_s = parse_duration(args.timeout) if args.timeout is not None else None
    app = operator_app(args)
    _call(app.admin.known_queue, queue)
    final = watch_drain(
        lambda: app.stats(queue),
        make_view(queue, plain_every_s=max(args.interval, 1.0)),
        interval_s=args.interval,
        timeout_s=timeout_s,
    )
    if final is None:
        print(f"fastq: {queue} not drained within {args.timeout}", file=sys.stderr)
        return 1
    print(f"{queue} drained: {final.done} done, {final.failures} failed, {final.dead} dead")
    return 0


# -- parsers ------------------------------------------------------------------------


def _app_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", help=_OPTIONAL_APP)


def add_parsers(sub: Any, connection: Any) -> None:
    """Add the operator commands to ``sub``; ``connection(p)`` adds --redis-url and
    --namespace."""
    s = sub.add_parser(
        "stats",
        help="counts of queues: ready, inflight, scheduled, dead, broken, processed, ...",
        epilog="examples:\n  fastq stats\n  fastq stats -q mailer --watch\n"
        "  fastq stats --json | jq .mailer.ready",
    )
    _app_option(s)
    s.add_argument("-q", "--queues", help="comma-separated queues (default: all known)")
    s.add_argument("--json", action="store_true", help="one JSON object per sample")
    s.add_argument("--watch", action="store_true", help="print again every --interval, with rates")
    s.add_argument("--interval", type=float, default=2.0, help="seconds between --watch samples")
    s.set_defaults(func=cmd_stats)

    qs = sub.add_parser(
        "queues", help="list the known queues with their depth",
        epilog="example:\n  fastq queues --namespace fastq",
    )  # fmt: skip
    _app_option(qs)
    qs.set_defaults(func=cmd_queues)

    for what, func in (("dead", cmd_dead), ("broken", cmd_broken)):
        why = "failed for good" if what == "dead" else "could not run (bad payload, unknown job)"
        p = sub.add_parser(
            what,
            help=f"list, retry or purge the jobs that {why}",
            epilog=f"examples:\n  fastq {what} list -q mailer\n"
            f"  fastq {what} retry -q mailer --limit 100\n  fastq {what} purge -q mailer --yes",
        )
        p.add_argument("action", choices=("list", "retry", "purge"), help="what to do")
        p.add_argument("-q", "--queue", required=True, help="the queue")
        p.add_argument(
            "--limit", type=int, help="jobs to list (default 50) or retry (default: all)"
        )
        p.add_argument("--json", action="store_true", help="list: print JSON")
        p.add_argument("-v", "--verbose", action="store_true", help="list: every field, traceback")
        p.add_argument("--yes", action="store_true", help="purge: do not refuse")
        _app_option(p)
        p.set_defaults(func=func)

    e = sub.add_parser(
        "enqueue",
        help="enqueue one job by name; prints its id",
        epilog="examples:\n  fastq enqueue send_email --args '[\"a@example.com\"]' -q mailer\n"
        '  fastq enqueue report --kwargs \'{"day": "2026-11-23"}\' --in 30s --app myapp',
    )
    e.add_argument("name", help="the job's registered name")
    e.add_argument("--args", default="[]", help="positional arguments, a JSON array")
    e.add_argument("--kwargs", default="{}", help="keyword arguments, a JSON object")
    e.add_argument("-q", "--queue", help="the queue (default: the job's, else 'default')")
    e.add_argument("--in", dest="delay", help="run it this much later, e.g. 30s, 5m, 2h")
    e.add_argument("--id", help="a job id (enqueueing an id that exists does nothing)")
    e.add_argument("--priority", type=int, help="higher runs first")
    e.add_argument("--new-queue", action="store_true", help="allow a queue fastq does not know")
    _app_option(e)
    e.set_defaults(func=cmd_enqueue)

    w = sub.add_parser(
        "wait",
        help="a live progress bar until a queue is drained (done/total, jobs/s, ETA)",
        epilog="examples:\n  fastq wait -q mailer\n  fastq wait -q mailer --timeout 10m",
    )
    w.add_argument("-q", "--queue", required=True, help="the queue")
    w.add_argument("--timeout", help="give up (exit 1) after this long, e.g. 90s, 10m")
    w.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    _app_option(w)
    w.set_defaults(func=cmd_wait)

    wk = sub.add_parser(
        "workers",
        help="the workers holding jobs now, and what they run",
        epilog="examples:\n  fastq workers\n  fastq workers -q mailer -v",
    )
    wk.add_argument("-q", "--queue", help="the queue (default: every known queue)")
    wk.add_argument("-v", "--verbose", action="store_true", help="each job held: id and name")
    wk.add_argument("--json", action="store_true", help="print JSON")
    _app_option(wk)
    wk.set_defaults(func=cmd_workers)

    for p in (s, qs, e, w, wk, *(sub.choices[n] for n in ("dead", "broken"))):
        connection(p)
