"""The live view of a queue draining (``fastq wait``): done / total, jobs/s, ETA and
failures, drawn with rich when it is installed (``pip install fastq[progress]``) and
stdout is a terminal, else as plain lines. ``CountView`` feeds the same view from
counts a caller already has (the benchmarks, which count completions their own way)."""

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


class Rate:
    """Jobs/s of a drain, smoothed: a figure that does not jump with every sample.

    Args:
        every_s: take a new sample only once this long has passed since the last
            (a caller polling every few ms would otherwise show noise)."""

    def __init__(self, every_s: float = 0.0) -> None:
        self.every_s = every_s
        self.last_t = time.monotonic()
        self.last_done = 0
        self.jobs_s = 0.0

    def sample(self, done: int, force: bool = False) -> float:
        """The rate once ``done`` jobs have ended since the start; ``force``: a new
        sample however recent the last (the last figure of a drain shorter than
        ``every_s`` is then its mean rate, not 0)."""
        now = time.monotonic()
        if now > self.last_t and (force or now - self.last_t >= self.every_s):
            sample = (done - self.last_done) / (now - self.last_t)
            self.jobs_s = sample if self.last_done == 0 else 0.7 * self.jobs_s + 0.3 * sample
            self.last_t, self.last_done = now, done
        return self.jobs_s


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
            self.task,
            completed=t.done,
            total=t.total,
            rate=rate,
            failures=t.failures,
            dead=t.dead,
        )

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


class CountView:
    """A view fed counts directly: ``done`` jobs of a known ``total``, for a caller
    that counts completions its own way and reads them anyway. Closes on leaving a
    ``with`` block.

    Args:
        view: what ``make_view`` returns, or anything with its ``update``/``close``.
        total: the jobs of the drain.
        rate_every_s: how often the jobs/s figure takes a new sample."""

    def __init__(self, view: Any, total: int, rate_every_s: float = 0.5) -> None:
        self.view, self.total = view, total
        self.rate = Rate(rate_every_s)

    def update(self, done: int, failures: int = 0, dead: int = 0, final: bool = False) -> None:
        t = Tally(done, max(self.total - done, 0), failures, dead)
        self.view.update(t, self.rate.sample(done, force=final), final=final)

    def close(self) -> None:
        self.view.close()

    def __enter__(self) -> CountView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    t0 = time.monotonic()
    jobs_s = Rate()
    try:
        while True:
            t = tally(start, read())
            rate = jobs_s.sample(t.done)
            now = time.monotonic()
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
