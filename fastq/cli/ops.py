"""The commands about queues: ``stats``, ``queues``, ``workers``, ``wait`` (a
progress bar until one is drained), ``pause``, ``resume``, ``limit`` (a rate
limit), ``purge``, and the ``periodic`` jobs' schedules.

They need no ``--app`` (a bare App on ``--redis-url`` / ``$FASTQ_REDIS_URL`` and
``--namespace`` is enough); with one, its registered jobs and queues are known too.
The commands about jobs are in :mod:`fastq.cli.jobs`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Optional

import orjson

from fastq.app import App
from fastq.cli.common import (
    OPTIONAL_APP,
    CliError,
    add_connection_options,
    app_hint,
    configured_app,
    known_queue,
    one_queue,
    operator_app,
    parse_duration,
    parse_queues,
)
from fastq.cli.progress import make_view, watch_drain
from fastq.cli.workers import serving_note
from fastq.protocol.keys import validate_queue_name
from fastq.protocol.workers import workers_per_queue
from fastq.ratelimit import check_rate_key
from fastq.validate import RateLimit, parse_rate_limit

STATS_FIELDS = (
    "ready",
    "inflight",
    "scheduled",
    "dead",
    "broken",
    "enqueued",
    "processed",
    "failed",
    "cancelled",
)
# what went wrong beside failures, on the plain line too: jobs retried, stalled (their
# worker died or hung running them), orphaned (handed back from a dead worker), and
# acks that came too late to count
FAULT_FIELDS = ("retried", "stalled", "orphaned", "stale_acks")
# what app.stats() says that a row shows another way (the rate limit, a pause, shards)
_SETTINGS = ("rate", "rate_period_ms", "rate_burst", "paused", "shards")


def _stats_queues(args: argparse.Namespace, app: App) -> list[str]:
    known = app.queues()
    if not args.queues:
        return [q for q in known if _valid(q)]
    queues = parse_queues(args.queues)
    unknown = [q for q in queues if q not in known]
    if unknown:
        raise CliError(
            f"unknown queue {unknown[0]!r} on {app.store.where} (known: "
            f"{', '.join(known) or 'none'}){app_hint(args)}"
        )
    return queues


def _valid(queue: str) -> bool:
    try:
        validate_queue_name(queue)
    except (TypeError, ValueError):
        return False
    return True


def _stats_row(counts: dict[str, int], rate: Optional[float]) -> dict[str, Any]:
    row: dict[str, Any] = {f: counts[f] for f in STATS_FIELDS}
    row.update((f, counts[f]) for f in FAULT_FIELDS)
    # and every other counter app.stats() has (--json shows them all)
    row.update((f, n) for f, n in counts.items() if f not in row and f not in _SETTINGS)
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
        shown = " ".join(f"{f}={row[f]}" for f in (*STATS_FIELDS, *FAULT_FIELDS))
        rate = "-" if row["rate"] is None else f"{row['rate']:g}/s"
        flags = " paused" if row["paused"] else ""
        if "shards" in row:
            flags += f" shards={row['shards']}"
        limit = row["limit"] or "off"
        print(f"{q} {shown} workers={row['workers']} rate={rate} limit={limit}{flags}", flush=True)


def cmd_stats(args: argparse.Namespace) -> int:
    """Per queue: ready, inflight, scheduled, dead, broken, enqueued, processed, failed,
    cancelled, retried, stalled, orphaned, stale_acks (with --json every counter of
    ``app.stats()``), the worker processes serving it (the worker registry), and
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
        serving = workers_per_queue(app.workers())
        rows = {}
        for q, c in counts.items():
            rate = None
            if q in before:
                rate = (c["processed"] - before[q]["processed"]) / max(now - t_before, 1e-9)
            rows[q] = _stats_row(c, rate)
            rows[q]["workers"] = serving.get(q, 0)
        if args.watch and not args.json and sys.stdout.isatty():
            print("\x1b[2J\x1b[H", end="")  # clear the screen: a table that stays put
        _print_stats(rows, args.json)
        if not args.json:
            _print_circuits(app.circuits())
        if not args.watch:
            return 0
        before, t_before = counts, now
        time.sleep(args.interval)


def _print_circuits(states: dict[str, dict[str, Any]]) -> None:
    """The circuit breakers open or half-open (none: nothing printed)."""
    shown = {key: st for key, st in states.items() if st["state"] != "closed"}
    if not shown:
        return
    print("circuits:")
    width = max(len(key) for key in shown)
    for key in sorted(shown):
        st = shown[key]
        when = f" for {st['open_s']:.1f} s" if st["state"] == "open" else ""
        n = st["level"] + 1
        times = "once" if n == 1 else f"{n} times"
        print(f"  {key:<{width}}  {st['state']}{when} (opened {times} in a row)")


def cmd_queues(args: argparse.Namespace) -> int:
    """Every queue the namespace knows (and the app registers), with its depth;
    a name that is not a valid queue name is listed as such."""
    app = operator_app(args)
    registered = {job.queue for job in app.registry.values()}
    known = app.queues()
    if not known:
        print("no queues")
        return 0
    serving = workers_per_queue(app.workers())
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
            f"dead={c['dead']} broken={c['broken']} workers={serving.get(q, 0)}{state}{note}"
        )
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    """A live progress bar until the queue is drained: exit 0 then, 1 on --timeout."""
    queue = one_queue(args)
    if args.interval <= 0:
        raise CliError(f"--interval must be > 0 seconds, not {args.interval:g}")
    timeout_s = parse_duration(args.timeout) if args.timeout is not None else None
    app = operator_app(args)
    known_queue(args, app, queue)
    note_serving = serving_note(app, queue)

    def read() -> dict[str, int]:
        note_serving()
        return app.stats(queue)

    final = watch_drain(
        read,
        make_view(queue, plain_every_s=max(args.interval, 1.0)),
        interval_s=args.interval,
        timeout_s=timeout_s,
    )
    if final is None:
        print(f"fastq: {queue} not drained within {timeout_s:g}s (--timeout)", file=sys.stderr)
        return 1
    print(f"{queue} drained: {final.done} done, {final.failures} failed, {final.dead} dead")
    return 0


def _flow_call(fn: Callable[[str], object], queue: str) -> object:
    """Run ``fn(queue)``; an unknown queue is a one-line usage error."""
    try:
        return fn(queue)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def cmd_pause(args: argparse.Namespace) -> int:
    queue = one_queue(args)
    _flow_call(operator_app(args).pause, queue)
    print(f"paused {queue}: workers claim nothing from it until `fastq resume -q {queue}`")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    queue = one_queue(args)
    _flow_call(operator_app(args).resume, queue)
    print(f"resumed {queue}")
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """Show (no RATE), set or lift (``off``) a queue's rate limit, or one key's of a
    per-key limit (``--key``); list the keys' (``--keys``). Bad input is refused
    before the app is imported, and nothing is written."""
    if args.keys or args.key is not None:
        return _key_limit(args)
    queue, text = args.queue, args.rate
    if queue is None:
        raise CliError("give a queue (fastq limit QUEUE [RATE]), --key KEY or --keys")
    limit = _limit_given(
        text,
        args.burst,
        "fastq limit ... QUEUE 600/m --burst 10",
        lambda: validate_queue_name(queue),
    )
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


def _limit_given(
    text: Optional[str], burst: Optional[int], example: str, check: Callable[[], object]
) -> Optional[RateLimit]:
    """The limit a command line gives (None: none given, or ``off``), once ``check()``
    (of the queue's name, or the key) passed; bad input is a one-line error."""
    off = text is not None and text.strip().lower() == "off"
    if burst is not None and (text is None or off):
        raise CliError(f"--burst goes with a rate, e.g. `{example}`")
    try:
        check()
        return parse_rate_limit(text, burst) if text is not None and not off else None
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _key_limit(args: argparse.Namespace) -> int:
    """``fastq limit --key KEY [RATE|off]`` and ``fastq limit --keys``."""
    if args.keys:
        if args.key is not None or args.queue is not None:
            raise CliError("--keys lists every key's limit: give no queue, key or rate")
        limits = operator_app(args).key_rate_limits()
        for key in sorted(limits):
            print(f"{key}: {limits[key]}")
        if not limits:
            print("no key has a rate of its own")
        return 0
    if args.rate is not None:
        raise CliError("with --key, give only the rate: fastq limit --key KEY 20/s")
    key, text = args.key, args.queue  # the one positional given is the rate
    limit = _limit_given(
        text, args.burst, "fastq limit --key KEY 20/s --burst 5", lambda: check_rate_key(key)
    )
    app = operator_app(args)
    if text is None:
        limit = app.key_rate_limits().get(key)
        print(f"{key}: {limit}" if limit else f"{key}: its jobs' own rate (none of its own)")
        return 0
    if limit is None:
        app.set_key_rate_limit(key, None)
        print(f"{key}: its jobs' own rate")
        return 0
    app.set_key_rate_limit(key, limit.rate, per_s=limit.period_ms / 1000, burst=limit.burst)
    print(f"{key}: at most {limit}, across every worker (other keys: their jobs' own rate)")
    return 0


_LIMIT_EPILOG = """\
examples:
  fastq limit mailer 14/s            at most 14 job starts a second
  fastq limit mailer 600/m --burst 10
  fastq limit reports 100/h
  fastq limit mailer                 show the limit
  fastq limit mailer off             lift it
  fastq limit --key dom:slow.example 20/s
                                     the jobs whose rate_key is dom:slow.example:
                                     20 starts a second, whatever their job's rate
  fastq limit --key dom:slow.example off
  fastq limit --keys                 every key's own rate

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
    queue = one_queue(args)
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


def cmd_periodic(args: argparse.Namespace) -> int:
    """One line per periodic job: name, queue, schedule, overlap, last and next fire
    times (ISO 8601, in the schedule's zone), and the id of its last run."""
    from fastq.reaper.firer import last_fired

    app = configured_app(args)
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


# -- parsers ------------------------------------------------------------------------


def add_stats(sub: Any) -> None:
    s = sub.add_parser(
        "stats",
        help="counts of queues: ready, inflight, scheduled, dead, broken, processed, ...",
        epilog="examples:\n  fastq stats\n  fastq stats -q mailer --watch\n"
        "  fastq stats --json | jq .mailer.ready",
    )
    s.add_argument("--app", help=OPTIONAL_APP)
    s.add_argument("-q", "--queues", help="comma-separated queues (default: all known)")
    s.add_argument("--json", action="store_true", help="one JSON object per sample")
    s.add_argument("--watch", action="store_true", help="print again every --interval, with rates")
    s.add_argument("--interval", type=float, default=2.0, help="seconds between --watch samples")
    s.set_defaults(func=cmd_stats)
    add_connection_options(s)


def add_queues(sub: Any) -> None:
    qs = sub.add_parser(
        "queues",
        help="list the known queues with their depth",
        epilog="example:\n  fastq queues --namespace fastq",
    )
    qs.add_argument("--app", help=OPTIONAL_APP)
    qs.set_defaults(func=cmd_queues)
    add_connection_options(qs)


def cmd_groups(args: argparse.Namespace) -> int:
    """A queue's groups with ready jobs, in the order its claims serve them next, and
    which are paused; or pause (``--pause``) or resume (``--resume``) one."""
    queue = one_queue(args)
    app = operator_app(args)
    for group, paused in ((args.pause, True), (args.resume, False)):
        if group is not None:
            try:
                (app.pause_group if paused else app.resume_group)(queue, group)
            except (TypeError, ValueError) as exc:
                raise CliError(str(exc)) from None
            print(f"{'paused' if paused else 'resumed'} group {group} of {queue}")
            return 0
    depths = _flow_call(app.groups, queue)
    assert isinstance(depths, dict)
    paused_now = set(app.paused_groups(queue))
    if args.json:
        print(orjson.dumps({"ready": depths, "paused": sorted(paused_now)}).decode())
        return 0
    if not depths and not paused_now:
        print(f"{queue}: no group has a job ready")
        return 0
    rows = {**depths, **{group: depths.get(group, 0) for group in paused_now}}
    width = max(len(group or "(no group)") for group in rows)
    print(f"{'group':<{width}}  {'ready':>8}")
    for group, n in rows.items():
        mark = "  paused" if group in paused_now else ""
        print(f"{group or '(no group)':<{width}}  {n:>8,}{mark}")
    return 0


def add_groups(sub: Any) -> None:
    gr = sub.add_parser(
        "groups",
        help="a queue's groups with jobs ready, in the order they are served next",
        epilog="examples:\n  fastq groups -q mailer\n  fastq groups -q mailer --pause tenant-42",
    )
    _add_flow_options(gr)
    gr.add_argument(
        "--json",
        action="store_true",
        help='one JSON object: {"ready": {group: n}, "paused": [...]}',
    )
    gr.add_argument("--pause", metavar="GROUP", help="claims pass over this group's jobs")
    gr.add_argument("--resume", metavar="GROUP", help="lift a group's pause")
    gr.set_defaults(func=cmd_groups)


def add_wait(sub: Any) -> None:
    w = sub.add_parser(
        "wait",
        help="a live progress bar until a queue is drained (done/total, jobs/s, ETA)",
        epilog="examples:\n  fastq wait -q mailer\n  fastq wait -q mailer --timeout 10m",
    )
    w.add_argument("-q", "--queue", required=True, help="the queue")
    w.add_argument("--timeout", help="give up (exit 1) after this long, e.g. 90s, 10m")
    w.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    w.add_argument("--app", help=OPTIONAL_APP)
    w.set_defaults(func=cmd_wait)
    add_connection_options(w)


def add_pause(sub: Any) -> None:
    pa = sub.add_parser(
        "pause",
        help="stop workers claiming from a queue (jobs in hand finish)",
        epilog="examples:\n  fastq pause -q mailer\n  fastq pause -q mailer --namespace shop",
    )
    pa.set_defaults(func=cmd_pause)
    _add_flow_options(pa)


def add_resume(sub: Any) -> None:
    rs = sub.add_parser(
        "resume",
        help="let workers claim from a paused queue again, at once",
        epilog="examples:\n  fastq resume -q mailer",
    )
    rs.set_defaults(func=cmd_resume)
    _add_flow_options(rs)


def add_purge(sub: Any) -> None:
    pu = sub.add_parser(
        "purge",
        help="delete a queue's ready and scheduled jobs (never in flight)",
        epilog="examples:\n  fastq purge -q mailer\n  fastq purge -q mailer --dead --broken --yes",
    )
    pu.add_argument("--dead", action="store_true", help="delete its dead jobs too")
    pu.add_argument("--broken", action="store_true", help="delete its broken jobs too")
    pu.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    pu.set_defaults(func=cmd_purge)
    _add_flow_options(pu)


def _add_flow_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", help=OPTIONAL_APP)
    p.add_argument("-q", "--queue", required=True, help="the queue")
    add_connection_options(p)


def add_limit(sub: Any) -> None:
    li = sub.add_parser(
        "limit",
        help="show, set or lift a queue's global rate limit (e.g. 14/s)",
        epilog=_LIMIT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    li.add_argument("--app", help=OPTIONAL_APP)
    li.add_argument("queue", nargs="?", help="the queue (with --key: the rate)")
    li.add_argument("rate", nargs="?", help="JOBS/UNIT with UNIT s, m, h or d (e.g. 14/s), or off")
    li.add_argument(
        "--key",
        help="a key of a per-key limit (a job's formatted rate_key, e.g. dom:slow.example) "
        "instead of a queue",
    )
    li.add_argument("--keys", action="store_true", help="list every key's own rate")
    li.add_argument("--burst", type=int, help="job starts allowed at once after a quiet spell")
    add_connection_options(li)
    li.set_defaults(func=cmd_limit)


def add_periodic(sub: Any) -> None:
    pe = sub.add_parser(
        "periodic",
        help="list periodic jobs with their last and next fire times",
        epilog="examples:\n  fastq periodic --app myapp",
    )
    pe.add_argument("--app", required=True, help="module (or module:attr) of the app")
    add_connection_options(pe)
    pe.set_defaults(func=cmd_periodic)


# each command's parser, by name (fastq.cli.main orders them)
COMMANDS: dict[str, Callable[[Any], None]] = {
    "stats": add_stats,
    "queues": add_queues,
    "wait": add_wait,
    "pause": add_pause,
    "resume": add_resume,
    "purge": add_purge,
    "limit": add_limit,
    "groups": add_groups,
    "periodic": add_periodic,
}
