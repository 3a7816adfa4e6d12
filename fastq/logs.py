"""Logging set-up: ``--log-level`` and ``--log-format text|json``.

Everything fastq logs goes through :mod:`logging`, one line per event. In JSON each
line is one object: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
and the fields known where it was logged (``queue``, ``job``, ``job_id``,
``worker``; ``exc`` for a traceback). Per-job lines (logger ``fastq.jobs``) are
written only at DEBUG: they come from a hook (:func:`fastq.hooks.job_logger`) that a worker adds
only then, so that jobs otherwise stay on the fast path.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Optional

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = ("queue", "job", "job_id", "worker")

# fields of this process added to each JSON line (a worker sets its id)
_process_fields: dict[str, Any] = {}


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_process_fields)
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _iso_time(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


def parse_level(level: str) -> int:
    """``DEBUG``, ``info``... as a logging level; ValueError if unknown."""
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r} (DEBUG, INFO, WARNING or ERROR)")
    return value


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Send every log line to stderr at ``level`` or above, as ``fmt`` (text or json).

    Raises:
        ValueError: an unknown level or format.
    """
    value = parse_level(level)
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (text or json)")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(value)


def set_process_field(name: str, value: Optional[Any]) -> None:
    """A field every JSON line of this process carries (``worker``)."""
    if value is None:
        _process_fields.pop(name, None)
    else:
        _process_fields[name] = value
