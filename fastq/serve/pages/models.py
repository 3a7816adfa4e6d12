"""What the dashboard's pages show, read through the :class:`fastq.App`'s own
methods (the CLI's): plain data for the templates, computed in the thread pool."""

from __future__ import annotations

import time
from typing import Any, Optional

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.errors import JobFailed, NoResult, ResultTimeout
from fastq.protocol.history import merge
from fastq.protocol.workers import workers_per_queue


def rate_text(stats: dict[str, int]) -> str:
    if not stats.get("rate"):
        return "none"
    per_s = stats["rate_period_ms"] / 1000
    period = "s" if per_s == 1 else f"{per_s:g}s"
    return f"{stats['rate']}/{period} (burst {stats['rate_burst']})"


# each queue's history as last read, by (Redis, namespace, queue, window): read again
# once its current slot may have grown (the overview polls every 3 s, a slot is 10 s;
# every tab and both the table and the chart share one read)
HISTORY_TTL_S = 10.0
_histories: dict[tuple[str, str, str, int], tuple[float, list[tuple[int, int, int]]]] = {}


def cached_history(app: App, queue: str, window_s: int) -> list[tuple[int, int, int]]:
    """``app.history(queue, window_s)``, read at most every :data:`HISTORY_TTL_S`
    by this server: what open tabs cost Redis."""
    key = (app.redis_url, app.namespace, queue, window_s)
    now = time.monotonic()
    cached = _histories.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    history = app.history(queue, window_s)
    if len(_histories) > 10_000:
        _histories.clear()  # queues come and go: it never grows without bound
    _histories[key] = (now + HISTORY_TTL_S, history)
    return history


def queue_rows(app: App) -> list[dict[str, Any]]:
    """Every known queue with its stats, its workers and its jobs done in the hour."""
    serving = workers_per_queue(app.workers())
    rows = []
    for queue in app.queues():
        if not valid_name(queue):
            continue
        stats = app.stats(queue)
        hour = cached_history(app, queue, 3600)
        rows.append(
            {
                "name": queue,
                "stats": stats,
                "done_hour": sum(p for _, p, _ in hour),
                # the last minute's 6 whole slots (the current one is still filling)
                "per_s": sum(p for _, p, _ in hour[-7:-1]) / 60,
                "failed_hour": sum(f for _, _, f in hour),
                "rate": rate_text(stats),
                "workers": serving.get(queue, 0),
            }
        )
    return rows


def history_series(app: App, queue: Optional[str], window_s: int) -> dict[str, Any]:
    """The chart's series: slot times (Unix seconds), jobs done, jobs failed, of one
    queue or (None) of every queue summed."""
    names = [queue] if queue else [q for q in app.queues() if valid_name(q)]
    slots = merge([cached_history(app, q, window_s) for q in names])
    return {
        "t": [slot_ms / 1000 for slot_ms, _, _ in slots],
        "processed": [p for _, p, _ in slots],
        "failed": [f for _, _, f in slots],
    }


# -- a queue's jobs -------------------------------------------------------------------

PAGE_SIZE = 50
# how deep the done, cancelled, dead and broken listings go (each page reads them
# from the newest or the oldest): 200 pages
MAX_LISTED = 10_000
# the queue page's tabs: (state, label, the stats count shown beside it or None)
STATES = (
    ("queued", "ready", "ready"),
    ("scheduled", "scheduled", "scheduled"),
    ("active", "in flight", "inflight"),
    ("done", "done", None),
    ("dead", "dead", "dead"),
    ("broken", "broken", "broken"),
    ("cancelled", "cancelled", None),
)


def running_since(app: App, queue: str) -> dict[str, dict[str, Any]]:
    """What the worker registry says of the jobs of ``queue`` running now: job id ->
    the child running it (``host``, ``pid``) and ``since`` (Unix seconds)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in app.workers(queue):
        for child in entry.get("children", ()):
            job = child.get("job") or {}
            if job.get("queue") == queue and job.get("id"):
                out[str(job["id"])] = {
                    "host": entry.get("host"),
                    "pid": child.get("pid"),
                    "since": job.get("since"),
                }
    return out


def queue_jobs(app: App, queue: str, state: str, page: int) -> tuple[list[Any], bool]:
    """A page of the jobs of ``queue`` in ``state``, and whether another follows."""
    start = page * PAGE_SIZE
    want = start + PAGE_SIZE + 1  # one more: is there a next page?
    if state in ("queued", "scheduled"):
        jobs: list[Any] = app.waiting_jobs(queue, state, start, PAGE_SIZE + 1)
        return jobs[:PAGE_SIZE], len(jobs) > PAGE_SIZE
    if state == "active":
        running = running_since(app, queue)
        rows = []
        for holder in app.holders(queue):
            for job_id, name in sorted(holder.jobs.items()):
                rows.append(
                    {
                        "id": job_id,
                        "name": name,
                        "worker": holder.worker,
                        "lease_until": holder.lease_until,
                        "running": running.get(job_id),
                    }
                )
        return rows[start : start + PAGE_SIZE], len(rows) > start + PAGE_SIZE
    if start >= MAX_LISTED:  # these are read from their start: a bounded depth
        return [], False
    if state in ("done", "cancelled"):
        jobs = app.recent_jobs(queue, state, want)
    elif state == "dead":
        jobs = app.dead_jobs(queue, want)
    else:
        jobs = app.broken_jobs(queue, want)
    more = len(jobs) > start + PAGE_SIZE and start + PAGE_SIZE < MAX_LISTED
    return jobs[start : start + PAGE_SIZE], more


def result_of(app: App, info: Any) -> tuple[bool, Any]:
    """``(kept, value)``: a done job's kept result, if it keeps one."""
    if info.state != "done":
        return False, None
    try:
        return True, app.result(info.id, 0, queue=info.queue)
    except (NoResult, JobFailed, ResultTimeout):
        return False, None


# -- workers and periodic jobs ----------------------------------------------------------


def periodic_rows(app: App) -> list[dict[str, Any]]:
    """What ``fastq periodic`` prints, per periodic job of the server's app: its
    schedule, when it last fired and its run's id, when it fires next."""
    from fastq.reaper.firer import last_fired

    if not app.schedules:
        return []
    fired = last_fired(app)
    now_ms = int(time.time() * 1000)
    rows = []
    for job in app.schedules.values():
        schedule = job.schedule
        last_ms, run_id = fired[job.name]
        # a slot missed while no reaper ran is fired as soon as one runs
        upcoming = schedule.next_after_ms(now_ms if last_ms is None else last_ms)
        rows.append(
            {
                "name": job.name,
                "queue": job.queue,
                "schedule": schedule.describe(),
                "overlap": job.overlap,
                "last": schedule.local(last_ms).isoformat() if last_ms is not None else None,
                "last_ts": last_ms / 1000 if last_ms is not None else None,
                "run_id": run_id,
                "next": schedule.local(upcoming).isoformat(),
                "next_ts": upcoming / 1000,
                "missed": upcoming <= now_ms,
            }
        )
    return rows
