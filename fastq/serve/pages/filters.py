"""The templates' filters: times, sizes and arguments as the pages show them."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Optional

# characters of a job's arguments a listing shows at most: a queue page lists 50
# jobs, each of up to 4 MiB of arguments; the job's own page shows them whole
PREVIEW_CHARS = 200


def when(ts: Optional[float]) -> str:
    """A Unix time as the pages show it: UTC, to the second."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ts: Optional[float]) -> str:
    """How long ago ``ts`` was (or how long until it), in a few characters."""
    if ts is None:
        return "-"
    future = ts > time.time()
    text = lasted(ts)
    return f"in {text}" if future else f"{text} ago"


def lasted(ts: Optional[float]) -> str:
    """How long from ``ts`` to now (either way), in a few characters: ``12s``, ``3m 5s``."""
    if ts is None:
        return "-"
    delta = abs(time.time() - ts)
    if delta < 60:
        text = f"{delta:.0f}s"
    elif delta < 3600:
        text = f"{delta // 60:.0f}m {delta % 60:.0f}s"
    elif delta < 86400:
        text = f"{delta // 3600:.0f}h {delta % 3600 // 60:.0f}m"
    else:
        text = f"{delta // 86400:.0f}d {delta % 86400 // 3600:.0f}h"
    return text


def mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / (1024 * 1024):.0f} MiB"


def preview(args: Any, kwargs: Any = None) -> str:
    """A job's arguments as a listing shows them: their JSON (the keyword arguments
    after the positional ones, when any), cut to :data:`PREVIEW_CHARS` characters
    with an ellipsis."""
    text = _json(args) + (f" {_json(kwargs)}" if kwargs else "")
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[: PREVIEW_CHARS - 1] + "…"


def _json(value: Any) -> str:
    # as the job page's tojson writes them
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
