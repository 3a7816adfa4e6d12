"""The benchmarks' drain bar: ``fastq wait``'s view (``fastq.cli.progress``) on stderr.

A drain's timing loop feeds it the counts it already reads, so that the bar adds
no Redis round trip to the measured drain; a drain without such a loop gets
``polled``: one read every 0.5 s on a connection of its own, and only while a bar
is shown. Shown when stderr is a terminal and rich is installed; ``--progress``
forces it (plain lines without rich or a terminal), ``--no-progress`` hides it.
Stdout and the JSON reports are the same either way.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import threading
from typing import Any, Callable, Iterator, Optional

from fastq.cli.progress import CountView, Tally, make_view

POLLED_EVERY_S = 0.5

# None: when stderr is a terminal and rich is installed; set by configure()
SETTING: dict[str, Optional[bool]] = {"progress": None}


class NoView:
    """The view when no bar is shown."""

    def update(self, t: Tally, rate: float, final: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a live bar on stderr while each drain runs (default: when stderr is a "
        "terminal and rich is installed)",
    )


def configure(progress: Optional[bool]) -> None:
    SETTING["progress"] = progress


def enabled() -> bool:
    forced = SETTING["progress"]
    if forced is not None:
        return forced
    return sys.stderr.isatty() and importlib.util.find_spec("rich") is not None


def bar(label: str, total: int) -> CountView:
    """A bar for a drain of ``total`` jobs; feed it ``update(done, ...)``."""
    view: Any = make_view(label, sys.stderr) if enabled() else NoView()
    return CountView(view, total)


@contextlib.contextmanager
def polled(label: str, total: int, read_done: Callable[[], int]) -> Iterator[None]:
    """A bar fed by ``read_done`` every ``POLLED_EVERY_S`` from a thread, for a drain
    whose timing loop reads no count (it waits on its processes). ``read_done``
    must use a connection of its own. No thread and no read without a bar."""
    if not enabled():
        yield
        return
    stop = threading.Event()
    with bar(label, total) as shown:

        def poll() -> None:
            while not stop.is_set():
                try:
                    shown.update(read_done())
                except Exception:  # noqa: BLE001  (a bar that cannot read stops; the run goes on)
                    return
                stop.wait(POLLED_EVERY_S)

        thread = threading.Thread(target=poll, name="drain-bar", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        with contextlib.suppress(Exception):  # the drain is over; the bar shows where it ended
            shown.update(read_done(), final=True)
