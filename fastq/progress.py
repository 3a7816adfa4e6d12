"""The live view of a queue draining (``fastq wait``): done / total, jobs/s, ETA and
failures, drawn with rich when it is installed (``pip install fastq[progress]``) and
stdout is a terminal, else as plain lines."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, TextIO

# the stats counters of jobs that ended, one way or another
_ENDED = ("processed", "total_dead", "total_broken", "cancelled", "purged")


@dataclass(frozen=True)
class Tally:
    """Where a drain stands: ``done`` jobs ended since the start, ``left`` still
    queued, scheduled or in flight, ``failures`` failed attempts, ``dead`` deaths."""

    done: int
    left: int
    failures: int
    dead: int

    @property
    def total(self) -> int:
        return self.done + self.left


def tally(start: dict[str, int], now: dict[str, int]) -> Tally:
    """The progress between two ``App.stats`` of one queue."""
    done = sum(now[c] - start[c] for c in _ENDED)
    left = now["ready"] + now["scheduled"] + now["inflight"]
    return Tally(
        done, left, now["failed"] - start["failed"], now["total_dead"] - start["total_dead"]
    )


def eta_s(left: int, rate: float) -> Optional[float]:
    return left / rate if rate > 0 else None


def plain_line(queue: str, t: Tally, rate: float) -> str:
    """One line of the plain view, e.g. ``mailer: 1200/30000 done, 850 jobs/s, ETA 34s,
    2 failed, 0 dead``."""
    eta = eta_s(t.left, rate)
    shown = f"{eta:.0f}s" if eta is not None else "-"
    return (
        f"{queue}: {t.done}/{t.total} done, {rate:.0f} jobs/s, ETA {shown}, "
        f"{t.failures} failed, {t.dead} dead"
    )


class _PlainView:
    def __init__(self, queue: str, out: TextIO, every_s: float) -> None:
        self.queue, self.out, self.every_s = queue, out, every_s
        self.last = 0.0

    def update(self, t: Tally, rate: float, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self.last >= self.every_s:
            self.last = now
            print(plain_line(self.queue, t, rate), file=self.out, flush=True)

    def close(self) -> None:
        pass


class _RichView:
    def __init__(self, queue: str, out: TextIO) -> None:
        from rich.console import Console  # type: ignore[import-not-found,unused-ignore]
        from rich.progress import (  # type: ignore[import-not-found,unused-ignore]
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.0f} jobs/s"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[failures]} failed, {task.fields[dead]} dead"),
            console=Console(file=out),
        )
        self.task = self.progress.add_task(queue, total=None, rate=0.0, failures=0, dead=0)
        self.progress.start()

    def update(self, t: Tally, rate: float, final: bool = False) -> None:
        self.progress.update(
            self.task, completed=t.done, total=t.total, rate=rate, failures=t.failures,
            dead=t.dead,
        )  # fmt: skip

    def close(self) -> None:
        self.progress.stop()


def make_view(queue: str, out: TextIO = sys.stdout, plain_every_s: float = 1.0) -> Any:
    """rich's bar on a terminal when rich is installed, else plain lines."""
    if out.isatty():
        try:
            return _RichView(queue, out)
        except ImportError:
            pass
    return _PlainView(queue, out, plain_every_s)


def watch_drain(
    read: Callable[[], dict[str, int]],
    view: Any,
    *,
    interval_s: float,
    timeout_s: Optional[float],
    sleep: Callable[[float], None] = time.sleep,
) -> Optional[Tally]:
    """Read the queue's stats every ``interval_s`` and show them until nothing is left.

    Returns the final tally once drained, None when ``timeout_s`` passed first."""
    start = read()
    t0 = last_t = time.monotonic()
    last_done = 0
    rate = 0.0
    try:
        while True:
            t = tally(start, read())
            now = time.monotonic()
            if now > last_t:
                # smoothed: a jobs/s that does not jump with every sample
                sample = (t.done - last_done) / (now - last_t)
                rate = sample if last_done == 0 else 0.7 * rate + 0.3 * sample
                last_t, last_done = now, t.done
            if t.left == 0:
                view.update(t, rate, final=True)
                return t
            view.update(t, rate)
            if timeout_s is not None and now - t0 >= timeout_s:
                view.update(t, rate, final=True)
                return None
            sleep(interval_s)
    finally:
        view.close()
