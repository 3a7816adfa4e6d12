"""What the dashboard's pages show, read through the :class:`fastq.App`'s own
methods (the CLI's): plain data for the templates, computed in the thread pool."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Optional

from starlette.requests import Request

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.protocol.history import merge
from fastq.protocol.registry import workers_per_queue
from fastq.serve.guard import _is_loopback_host

# the overview's columns, from app.stats() (the name shown, the stats key)
COUNTS = (
    ("ready", "ready"),
    ("scheduled", "scheduled"),
    ("in flight", "inflight"),
    ("dead", "dead"),
    ("broken", "broken"),
)


def loopback(request: Request) -> bool:
    return _is_loopback_host(request.headers.get("host", "").encode())


def when(ts: Optional[float]) -> str:
    """A Unix time as the pages show it: UTC, to the second."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ts: Optional[float]) -> str:
    """How long ago ``ts`` was (or how long until it), in a few characters."""
    if ts is None:
        return "-"
    delta = time.time() - ts
    future = delta < 0
    delta = abs(delta)
    if delta < 60:
        text = f"{delta:.0f}s"
    elif delta < 3600:
        text = f"{delta // 60:.0f}m {delta % 60:.0f}s"
    elif delta < 86400:
        text = f"{delta // 3600:.0f}h {delta % 3600 // 60:.0f}m"
    else:
        text = f"{delta // 86400:.0f}d {delta % 86400 // 3600:.0f}h"
    return f"in {text}" if future else f"{text} ago"


def rate_text(stats: dict[str, int]) -> str:
    if not stats.get("rate"):
        return "none"
    per_s = stats["rate_period_ms"] / 1000
    period = "s" if per_s == 1 else f"{per_s:g}s"
    return f"{stats['rate']}/{period} (burst {stats['rate_burst']})"


def queue_rows(app: App) -> list[dict[str, Any]]:
    """Every known queue with its stats, its workers and its jobs done in the hour."""
    serving = workers_per_queue(app.workers())
    rows = []
    for queue in app.queues():
        if not valid_name(queue):
            continue
        stats = app.stats(queue)
        hour = app.history(queue, 3600)
        rows.append(
            {
                "name": queue,
                "stats": stats,
                "done_hour": sum(p for _, p, _ in hour),
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
    slots = merge([app.history(q, window_s) for q in names])
    return {
        "t": [slot_ms / 1000 for slot_ms, _, _ in slots],
        "processed": [p for _, p, _ in slots],
        "failed": [f for _, _, f in slots],
    }
