"""Logging set-up: ``--log-level`` and ``--log-format text|json``.

Everything fastq logs goes through :mod:`logging`, one line per event. In JSON each
line is one object: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
and the fields known where it was logged (``queue``, ``job``, ``job_id``,
``worker``; ``exc`` for a traceback). Per-job lines (logger ``fastq.jobs``) are
written only at DEBUG: they come from a hook (:func:`fastq.hooks.job_logger`) that a worker adds
only then, so that jobs otherwise stay on the fast path.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
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


class WholeLines(io.TextIOBase):
    """A child's stdout that writes whole lines, each batch of them in one
    ``write()``, so that what children print into one pipe or file never mixes
    within a line (a write of up to PIPE_BUF bytes to a pipe is atomic). A block
    buffer flushes mid-line, and even a line-buffered TextIOWrapper writes a print's
    text and its newline apart. What is left without a newline waits for the next
    one, or for ``flush()``."""

    def __init__(self, stream: io.TextIOWrapper) -> None:
        super().__init__()
        self._stream = stream
        self._fd = stream.fileno()
        self._partial = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]  # read-only in io.TextIOBase
        return self._stream.encoding

    @property
    def errors(self) -> Optional[str]:  # type: ignore[override]  # read-only there too
        return self._stream.errors

    @property
    def buffer(self) -> Any:  # what a job writing bytes reaches, after our text
        self.flush()
        return self._stream.buffer

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return self._stream.isatty()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        pending = self._partial + text
        cut = pending.rfind("\n") + 1
        self._partial = pending[cut:]
        if cut:
            self._write(pending[:cut])
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._write(self._partial)
            self._partial = ""

    def _write(self, text: str) -> None:
        data = memoryview(text.encode(self.encoding, self.errors or "strict"))
        while data:
            data = data[os.write(self._fd, data) :]


def print_whole_lines() -> None:
    """In a child: ``sys.stdout`` writes whole lines (:class:`WholeLines`)."""
    stdout = sys.stdout
    if isinstance(stdout, io.TextIOWrapper):
        with contextlib.suppress(ValueError, OSError):  # closed, or no file behind it
            stdout.flush()
            sys.stdout = WholeLines(stdout)
