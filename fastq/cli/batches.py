"""``fastq batch``: a batch's status (``app.batch_status``), the latest batches,
and closing or cancelling one (:mod:`fastq.producer.batches`).

Like the queue and job commands they need no ``--app``. An id that names no batch
(never opened, or expired: a batch is kept 7 days after it ended) is one line on
stderr naming the Redis read, and exit status 1, as ``fastq inspect`` does for a job.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import orjson

from fastq.app import App
from fastq.cli.common import (
    OPTIONAL_APP,
    CliError,
    Parser,
    add_connection_options,
    app_hint,
    call,
    operator_app,
)
from fastq.errors import BatchClosed
from fastq.protocol.batches import BatchStatus

_TIMES = ("started_at", "closed_at", "cancelled_at", "ended_at")


def _when(ts: Optional[float]) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def _unknown(args: argparse.Namespace, app: App, batch_id: str) -> CliError:
    return CliError(
        f"no batch {batch_id!r} on {app.store.where}: never opened, or it expired (a batch "
        f"is kept 7 days after it ended){app_hint(args)}",
        1,
    )


def _status(args: argparse.Namespace, app: App) -> BatchStatus:
    status: Optional[BatchStatus] = call(app.batch_status, args.batch_id)
    if status is None:
        raise _unknown(args, app, args.batch_id)
    return status


def format_status(status: BatchStatus) -> str:
    """A batch for a person: one ``field  value`` line each, times in UTC (ISO 8601)."""
    rows: list[tuple[str, str]] = []
    for name, value in status.as_dict().items():
        if name in _TIMES:
            shown = _when(value)
        elif name in ("queues", "children"):
            shown = ",".join(value) or "-"
        elif name == "callbacks":
            shown = " ".join(f"{kind}={job}" for kind, job in value.items()) or "-"
        else:
            shown = "-" if value is None or value == "" else str(value)
        rows.append((name, shown))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {shown}" for name, shown in rows)


def list_line(status: BatchStatus) -> str:
    """One batch of ``fastq batch list``: id, state, counts, started, description."""
    counts = (
        f"total={status.total} pending={status.pending} done={status.done} "
        f"failed={status.failed} dead={status.dead} cancelled={status.cancelled}"
    )
    return (
        f"{status.id} {status.state} {counts} started={_when(status.started_at)} "
        f"ended={_when(status.ended_at)} {status.description or '-'}"
    )


def cmd_status(args: argparse.Namespace) -> int:
    app = operator_app(args)
    status = _status(args, app)
    if args.json:
        print(orjson.dumps(status.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_status(status))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CliError(f"--limit must be at least 1, not {args.limit}")
    app = operator_app(args)
    found: list[BatchStatus] = call(app.list_batches, args.limit)
    if args.json:
        print(orjson.dumps([s.as_dict() for s in found]).decode())
        return 0
    if not found:
        print(f"no batch on {app.store.where}")
    for status in found:
        print(list_line(status))
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    app = operator_app(args)
    try:
        app.close_batch(args.batch_id)
    except BatchClosed:  # no such batch (call() would make it a usage error)
        raise _unknown(args, app, args.batch_id) from None
    status = _status(args, app)
    print(
        f"batch {args.batch_id} is {status.state}: no job joins it now ({status.pending} pending)"
    )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    app = operator_app(args)
    before = _status(args, app)
    if before.state == "ended":
        print(f"batch {args.batch_id} has ended: nothing to cancel")
        return 1
    try:
        n = app.cancel_batch(args.batch_id)
    except BatchClosed:  # it expired in between
        raise _unknown(args, app, args.batch_id) from None
    status = _status(args, app)
    print(
        f"cancelled batch {args.batch_id}: {n} waiting jobs will never run, "
        f"{status.pending} running finish; it is {status.state}"
    )
    return 0


# -- parsers ------------------------------------------------------------------------


def _leaf(sub: Any, name: str, help_text: str, example: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, epilog=f"examples:\n  {example}"
    )
    p.add_argument("--app", help=OPTIONAL_APP)
    # the top-level loop adds it to `batch`, not to its subcommands
    p.add_argument("--log-level", default=argparse.SUPPRESS, help="DEBUG, INFO, WARNING or ERROR")
    add_connection_options(p)
    return p


def add_batch(sub: Any) -> None:
    b = sub.add_parser(
        "batch",
        help="a batch's status, the latest batches, close or cancel one",
        epilog="examples:\n  fastq batch status 4xYfQiT5ez0000\n"
        "  fastq batch list --limit 20\n  fastq batch cancel 4xYfQiT5ez0000\n"
        "  fastq batch close import-2026-11-27",
    )
    actions = b.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=Parser)
    st = _leaf(
        actions,
        "status",
        "a batch's state and counts: total, pending, done, failed, dead, cancelled, times",
        "fastq batch status 4xYfQiT5ez0000 --json",
    )
    st.add_argument("batch_id", help="the batch's id (batch.id)")
    st.add_argument("--json", action="store_true", help="print JSON (times in Unix seconds)")
    st.set_defaults(func=cmd_status)
    li = _leaf(
        actions,
        "list",
        "the latest batches opened, newest first, one line each",
        "fastq batch list --limit 20",
    )
    li.add_argument("--limit", type=int, default=50, help="batches to list")
    li.add_argument("--json", action="store_true", help="print JSON: an array of statuses")
    li.set_defaults(func=cmd_list)
    ca = _leaf(
        actions,
        "cancel",
        "cancel a batch: its waiting jobs never run, those running finish",
        "fastq batch cancel 4xYfQiT5ez0000",
    )
    ca.add_argument("batch_id", help="the batch's id")
    ca.set_defaults(func=cmd_cancel)
    cl = _leaf(
        actions,
        "close",
        "close a batch left open (close=False): no job joins it; it ends as its jobs do",
        "fastq batch close import-2026-11-27",
    )
    cl.add_argument("batch_id", help="the batch's id")
    cl.set_defaults(func=cmd_close)


COMMANDS: dict[str, Callable[[Any], None]] = {"batch": add_batch}
