"""``fastq pool --reload``, for development: a thread of the master's watches the
app's source files (watchfiles, the ``reload`` extra) and sends the master a SIGHUP
when a ``.py`` file changes: the rolling restart re-imports the app, and new children
replace the old ones, which finish the job in hand."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING, Iterable, Optional

if TYPE_CHECKING:
    from fastq.pool.handback import HandBacks

log = logging.getLogger("fastq.master")


def require_watchfiles() -> None:
    """Say what to install before the pool starts, not after.

    Raises:
        RuntimeError: watchfiles is not installed.
    """
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        raise RuntimeError("--reload needs watchfiles: pip install 'fastq[reload]'") from None


class ReloadWatch(threading.Thread):
    def __init__(self, paths: list[str], pid: int, hand_backs: HandBacks) -> None:
        super().__init__(name="fastq-reload", daemon=True)
        self.paths = paths
        self.pid = pid
        # logging while the master forks would leave the child a held lock
        self.gate = hand_backs.fork_gate
        self._stop_event = threading.Event()

    def run(self) -> None:
        from watchfiles import PythonFilter, watch

        logging.getLogger("watchfiles").setLevel(logging.WARNING)  # its own lines, per change
        for changes in watch(
            *self.paths,
            watch_filter=PythonFilter(),
            stop_event=self._stop_event,
            raise_interrupt=False,
        ):
            changed = sorted({os.path.relpath(path) for _, path in changes})
            forget_bytecode(path for _, path in changes)
            with self.gate:
                log.info("master %d: %s changed; reloading the app", self.pid, ", ".join(changed))
            os.kill(self.pid, signal.SIGHUP)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(2.0)


def forget_bytecode(paths: Iterable[str]) -> None:
    """Delete the cached bytecode of these changed sources. Python checks a cache
    against its source's mtime in whole seconds and its size: an edit of the same
    size within the second of the last compile would leave the new children running
    the old code."""
    for path in paths:
        if path.endswith(".py"):
            with contextlib.suppress(OSError, ValueError):
                os.unlink(importlib.util.cache_from_source(path))


def watch_for_changes(paths: list[str], pid: int, hand_backs: HandBacks) -> Optional[ReloadWatch]:
    """Start watching ``paths`` (none: no watch)."""
    if not paths:
        return None
    watch = ReloadWatch(paths, pid, hand_backs)
    watch.start()
    with hand_backs.fork_gate:
        log.info("master %d: --reload: watching %s for .py changes", pid, ", ".join(paths))
    return watch
