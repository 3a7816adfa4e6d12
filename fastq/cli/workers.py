"""``fastq workers``: who serves the queues now (the worker registry,
:mod:`fastq.protocol.workers`) and which jobs each holds; and the note ``fastq
wait`` prints when no worker serves the queue it waits on."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any, Callable

import orjson

from fastq.app import App
from fastq.cli.common import (
    OPTIONAL_APP,
    add_connection_options,
    call,
    known_queue,
    one_queue,
    operator_app,
)
from fastq.protocol.workers import workers_per_queue


def cmd_workers(args: argparse.Namespace) -> int:
    """The live pools and lone workers (the worker registry), each child idle or
    busy and with what; then the workers holding jobs now, their leases, and with
    -v the jobs (id and name)."""
    app = operator_app(args)
    queue = one_queue(args) if args.queue else None
    if queue is not None:
        known_queue(args, app, queue)
    processes = call(app.workers, queue)
    # an idle worker keeps its (empty) lease: listed above, not as a holder
    found = [h for h in call(app.holders, queue) if h.jobs]
    if args.json:
        holders = [dataclasses.asdict(h) for h in found]
        print(orjson.dumps({"processes": processes, "holders": holders}).decode())
        return 0
    if not processes:
        what = f"queue {queue!r}" if queue else "any queue"
        print(f"no pool or worker serves {what} now (on {app.store.where})")
    for entry in processes:
        print(_process_line(entry))
        for child in entry.get("children", ()):
            print(f"  {_child_line(child)}")
    now = time.time()
    if found:
        print("holding jobs now:")
    for h in found:
        print(f"{h.queue} {h.worker} jobs={len(h.jobs)} lease={h.lease_until - now:+.1f}s")
        if args.verbose:
            for job_id, name in h.jobs.items():
                print(f"  {job_id} {name or '-'}")
    return 0


def _process_line(entry: dict[str, Any]) -> str:
    kind = "pool" if entry.get("kind") == "pool" else "worker (alone)"
    workers = sum(1 for c in entry.get("children", ()) if c.get("kind") == "worker")
    wanted = entry.get("children_wanted")
    count = f"{workers}/{wanted}" if wanted is not None else str(workers)
    return (
        f"{kind} {entry.get('id')} on {','.join(entry.get('queues', ())) or '-'}: {count} "
        f"worker{'s' if workers != 1 else ''}, since {_utc(entry.get('started_at'))} "
        f"(fastq {entry.get('version', '?')})"
    )


def _child_line(child: dict[str, Any]) -> str:
    parts = [f"{child.get('kind')} {child.get('pid')}"]
    state, job = child.get("state"), child.get("job")
    if state == "busy" and job:
        since = time.time() - float(job.get("since") or time.time())
        parts.append(f"busy {since:.1f}s on {job.get('queue')} {job.get('id') or '?'}")
    elif state == "busy":
        parts.append(f"busy ({len(child.get('in_flight', ()))} in flight)")
    elif state is not None:
        parts.append(state if state != "waiting" else "idle (waiting for work)")
    if child.get("rss"):
        parts.append(f"rss={child['rss'] >> 20}MiB")
    if "jobs_done" in child:
        parts.append(f"done={child['jobs_done']}")
    return " ".join(parts)


def _utc(unix_s: Any) -> str:
    if not unix_s:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(unix_s)))


def add_workers(sub: Any) -> None:
    wk = sub.add_parser(
        "workers",
        help="the live pools and workers, idle or busy, and the jobs they hold",
        epilog="examples:\n  fastq workers\n  fastq workers -q mailer -v",
    )
    wk.add_argument("-q", "--queue", help="the queue (default: every known queue)")
    wk.add_argument("-v", "--verbose", action="store_true", help="each job held: id and name")
    wk.add_argument("--json", action="store_true", help="print JSON")
    wk.add_argument("--app", help=OPTIONAL_APP)
    wk.set_defaults(func=cmd_workers)
    add_connection_options(wk)


def serving_note(app: App, queue: str, every_s: float = 5.0) -> Callable[[], None]:
    """A check for ``fastq wait`` to call as it polls: on stderr, a line when no
    worker serves ``queue`` (the wait would never end by itself), and one when
    some do again; it reads the registry every ``every_s`` at most."""
    state = {"next": 0.0, "serving": -1}

    def check() -> None:
        now = time.monotonic()
        if now < state["next"]:
            return
        state["next"] = now + every_s
        serving = workers_per_queue(app.workers(queue)).get(queue, 0)
        if serving == 0 and state["serving"] != 0:
            print(
                f"fastq: no worker serves {queue} now (`fastq workers` lists the live "
                "ones); still waiting",
                file=sys.stderr,
                flush=True,
            )
        elif serving and state["serving"] == 0:
            print(f"fastq: {serving} worker(s) serve {queue} now", file=sys.stderr, flush=True)
        state["serving"] = serving

    return check


COMMANDS = {"workers": add_workers}
