"""The commands about jobs: ``enqueue`` one, ``inspect`` one, ``cancel`` by id or
tag, list the ``jobs`` with a tag, the ``dead`` and ``broken`` ones (list, retry,
purge), and the ``lua`` scripts that other languages enqueue with.

Like the queue commands (:mod:`fastq.cli.ops`) they need no ``--app``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import orjson

from fastq.cli.common import (
    OPTIONAL_APP,
    CliError,
    add_connection_options,
    app_hint,
    call,
    one_or_all_queues,
    one_queue,
    operator_app,
    parse_duration,
)
from fastq.protocol.introspect import JobInfo

_TIMES = ("enqueued_at", "due_at", "lease_until", "failed_at", "cancelled_at", "ended_at")


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
    result, has_result = fields.pop("result"), fields.pop("has_result")
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
    if has_result:  # a kept return value (result_ttl_s), as JSON
        rows.append(("result", json.dumps(result, ensure_ascii=False)))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name.ljust(width)}  {shown}" for name, shown in rows]
    if traceback:
        lines += ["traceback:", *("  " + line for line in traceback.rstrip().splitlines())]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    """What fastq knows of one job (``app.get_job``); an unknown id exits 1."""
    queue = one_queue(args) if args.queue is not None else None
    app = operator_app(args)
    try:
        info = app.get_job(args.job_id, queue)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if info is None:
        where = f"queue {queue}" if queue else "any known queue"
        raise CliError(
            f"no job {args.job_id!r} in {where}: never enqueued, or it ended before "
            "what its queue keeps of ended jobs (7 days, 100,000 records by default)",
            1,
        )
    if args.json:
        print(orjson.dumps(_job_info_dict(info), option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_job_info(info))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    if (args.job_id is None) == (args.tag is None):
        raise CliError("give a JOB_ID or --tag TAG (one of them)")
    app = operator_app(args)
    queue = one_or_all_queues(args)
    try:
        if args.tag is not None:
            n = app.cancel_by_tag(args.tag, queue=queue)
            print(
                f"cancelled {n.total} jobs tagged {args.tag!r}: {n.stopped} stopped (never to"
                f" run), {n.held} held by a worker (may still run)"
            )
            return 0
        one = app.cancel(args.job_id, queue=queue)
        if one:
            how = (
                "stopped: it will not run" if one.stopped else "a worker holds it: it may still run"
            )
            print(f"cancelled {args.job_id} ({how})")
            return 0
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None
    print(f"{args.job_id}: nothing to cancel (unknown, completed, dead, broken or cancelled)")
    return 1


def cmd_jobs(args: argparse.Namespace) -> int:
    """One line per live job tagged ``--tag``: id, queue, state; or per job that
    ended (``--state``), newest first: id, queue, state, when, worker, error."""
    if (args.tag is None) == (args.state is None):
        raise CliError("give --tag TAG or --state STATE (one of them)")
    app = operator_app(args)
    queue = one_or_all_queues(args)
    if args.state is not None:
        return _recent(app, args.state, queue, args.limit)
    if args.limit is not None:
        raise CliError("--limit goes with --state")
    cursor: Optional[str] = None
    listed = 0
    while True:
        try:
            page = app.jobs_by_tag(args.tag, queue=queue, cursor=cursor, count=1000)
        except (TypeError, ValueError) as exc:
            raise CliError(str(exc)) from None
        for job in page.jobs:
            print(job.id, job.queue, job.state)
        listed += len(page.jobs)
        if page.cursor is None:
            break
        cursor = page.cursor
    if not listed:  # on stderr: a pipe reading the ids gets none, a person a reason
        where = f"queue {queue!r}" if queue else "any queue"
        print(
            f"fastq: no live job tagged {args.tag!r} on {where} of {app.store.where}",
            file=sys.stderr,
        )
    return 0


def _recent(app: Any, state: str, queue: Optional[str], limit: Optional[int]) -> int:
    limit = 50 if limit is None else limit
    found = []
    for q in [queue] if queue else app.queues():
        found += call(app.recent_jobs, q, state, limit)
    found.sort(key=lambda info: info.ended_at or 0.0, reverse=True)
    if not found:
        where = f"queue {queue!r}" if queue else "any queue"
        print(f"fastq: no {state} job recorded on {where} of {app.store.where}", file=sys.stderr)
    for job in found[:limit]:
        error = (job.last_error or "-").replace("\n", " ")
        print(job.id, job.queue, job.state, _when(job.ended_at), job.worker or "-", error)
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
        note = f" [unreadable envelope: {job.unreadable}]" if job.unreadable else ""
        print(f"{job.id} {job.name or '-'} attempts={job.attempts} {why or '-'}{note}")


def _section_command(args: argparse.Namespace, what: str) -> int:
    queue = one_queue(args)
    app = operator_app(args)
    if args.id is not None:
        return _one_job(app, args, what, queue)
    if args.action == "list":
        lister = app.dead_jobs if what == "dead" else app.broken_jobs
        jobs = call(lister, queue, args.limit or 50)
        if args.verbose and not args.json:
            print("\n\n".join(format_job_info(j) for j in jobs) or f"no {what} jobs in {queue}")
        else:
            _print_jobs(jobs, args.json, what, queue)
        return 0
    if args.action == "retry":
        if what == "dead":
            n = call(app.retry_dead, queue, args.limit)
            print(f"put {n} dead jobs back in {queue}, attempts reset")
            return 0
        n, skipped = call(app.retry_broken, queue, args.limit)
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
    n = call(
        app.purge,
        queue,
        ready=False,
        scheduled=False,
        dead=what == "dead",
        broken=what == "broken",
    )
    print(f"purged {n} {what} jobs from {queue}")
    return 0


def _one_job(app: Any, args: argparse.Namespace, what: str, queue: str) -> int:
    """``retry --id`` or ``purge --id``: one job, what the dashboard's buttons do."""
    if args.action == "list":
        raise CliError("--id goes with retry and purge (`fastq inspect ID` shows one job)")
    if args.limit is not None:
        raise CliError("--limit and --id exclude each other")
    fn = app.retry_job if args.action == "retry" else app.delete_job
    if not call(fn, args.id, queue):
        raise CliError(f"job {args.id} is not {what} in {queue}: nothing done", 1)
    done = "is queued again" if args.action == "retry" else "is deleted"
    print(f"job {args.id} {done}")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    return _section_command(args, "dead")


def cmd_broken(args: argparse.Namespace) -> int:
    return _section_command(args, "broken")


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
    queue = one_queue(args) if args.queue else (job.queue if job else "default")
    if queue not in app.queues() and not args.new_queue:
        raise CliError(
            f"unknown queue {queue!r} on {app.store.where}: no job was enqueued on it and "
            f"no job of the app uses it (add --new-queue to start it){app_hint(args)}"
        )
    if args.new_queue:
        app.declare_queue(queue)
    job_id = call(
        app.enqueue,
        args.name,
        job_args,
        kwargs,
        queue=queue,
        job_id=args.id,
        priority=args.priority,
        delay_s=delay_s,
    )
    print(job_id)
    return 0


def cmd_lua(args: argparse.Namespace) -> int:
    """Print a script as fastq loads it (its includes resolved), for producers in
    other languages to SCRIPT LOAD and EVALSHA (docs/protocol.md)."""
    from fastq.protocol import contracts

    # byte for byte: a file of it loads under the SHA1 fastq itself uses
    sys.stdout.buffer.write(contracts.BY_NAME[args.script].script.source)
    return 0


# -- parsers ------------------------------------------------------------------------


def add_dead_and_broken(sub: Any, what: str) -> None:
    why = "failed for good" if what == "dead" else "could not run (bad payload, unknown job)"
    p = sub.add_parser(
        what,
        help=f"list, retry or purge the jobs that {why}",
        epilog=f"examples:\n  fastq {what} list -q mailer\n"
        f"  fastq {what} retry -q mailer --limit 100\n  fastq {what} purge -q mailer --yes\n"
        f"  fastq {what} purge -q mailer --id JOB_ID",
    )
    p.add_argument("action", choices=("list", "retry", "purge"), help="what to do")
    p.add_argument("-q", "--queue", required=True, help="the queue")
    p.add_argument("--limit", type=int, help="jobs to list (default 50) or retry (default: all)")
    p.add_argument("--json", action="store_true", help="list: print JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="list: every field, traceback")
    p.add_argument("--yes", action="store_true", help="purge: do not refuse")
    p.add_argument("--id", help="retry or purge this one job (no --yes needed)")
    p.add_argument("--app", help=OPTIONAL_APP)
    p.set_defaults(func=cmd_dead if what == "dead" else cmd_broken)
    add_connection_options(p)


def add_enqueue(sub: Any) -> None:
    e = sub.add_parser(
        "enqueue",
        help="enqueue one job by name; prints its id",
        epilog="examples:\n"
        '  fastq enqueue send_email --app myapp --args \'["a@example.com", "hi"]\'\n'
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
    e.add_argument("--app", help=OPTIONAL_APP)
    e.set_defaults(func=cmd_enqueue)
    add_connection_options(e)


def add_inspect(sub: Any) -> None:
    ins = sub.add_parser(
        "inspect",
        help="show one job: state, arguments, attempts, error",
        epilog="examples:\n  fastq inspect 4xYfQiT5ez0000\n"
        "  fastq inspect 4xYfQiT5ez0000 -q mailer --json",
    )
    ins.add_argument("job_id", help="the id enqueue returned")
    ins.add_argument("--app", help=OPTIONAL_APP)
    ins.add_argument("-q", "--queue", help="the job's queue (default: look in every known queue)")
    ins.add_argument("--json", action="store_true", help="print JSON (times in Unix seconds)")
    add_connection_options(ins)
    ins.set_defaults(func=cmd_inspect)


def add_cancel(sub: Any) -> None:
    ca = sub.add_parser(
        "cancel",
        help="cancel a job by id, or every job with a tag (--tag)",
        epilog="examples:\n  fastq cancel 4xYfQiT5ez0000\n"
        "  fastq cancel --tag campaign-42 -q mailer",
    )
    ca.add_argument("job_id", nargs="?", metavar="JOB_ID", help="the job to cancel")
    ca.add_argument("--tag", help="cancel every live job with this tag; prints how many")
    ca.set_defaults(func=cmd_cancel)
    _add_tag_options(ca)


def add_jobs(sub: Any) -> None:
    jo = sub.add_parser(
        "jobs",
        help="list the live jobs with a tag, or the jobs that ended (--state)",
        epilog="examples:\n  fastq jobs --tag campaign-42\n"
        "  fastq jobs --tag campaign-42 -q mailer | wc -l\n"
        "  fastq jobs --state done -q mailer --limit 20",
    )
    jo.add_argument("--tag", help="the tag: its live jobs' id, queue, state")
    jo.add_argument(
        "--state",
        choices=("done", "dead", "cancelled"),
        help="the jobs that ended so, newest first, from their records: id, queue, state, "
        "when it ended (UTC), worker, error",
    )
    jo.add_argument("--limit", type=int, help="with --state: jobs to list (default 50)")
    jo.set_defaults(func=cmd_jobs)
    _add_tag_options(jo)


def _add_tag_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", help=OPTIONAL_APP)
    p.add_argument("-q", "--queue", help="the queue (default: every known queue)")
    add_connection_options(p)


def add_lua(sub: Any) -> None:
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


# each command's parser, by name (fastq.cli.main orders them)
COMMANDS: dict[str, Callable[[Any], None]] = {
    "dead": lambda sub: add_dead_and_broken(sub, "dead"),
    "broken": lambda sub: add_dead_and_broken(sub, "broken"),
    "enqueue": add_enqueue,
    "inspect": add_inspect,
    "cancel": add_cancel,
    "jobs": add_jobs,
    "lua": add_lua,
}
