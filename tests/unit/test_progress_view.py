"""The drain view of ``fastq wait``: its tally, its plain lines, when it stops; and
the same view fed counts directly (``CountView``, the benchmarks' bar)."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from fastq.cli.progress import CountView, Rate, Tally, make_view, plain_line, tally, watch_drain

ZERO = {
    "ready": 0,
    "scheduled": 0,
    "inflight": 0,
    "processed": 0,
    "failed": 0,
    "total_dead": 0,
    "total_broken": 0,
    "cancelled": 0,
    "purged": 0,
}


def stats(**counts: int) -> dict[str, int]:
    return {**ZERO, **counts}


def test_tally_counts_every_way_a_job_ends_since_the_start() -> None:
    start = stats(ready=100, processed=50, failed=1)
    now = stats(
        ready=10,
        inflight=5,
        scheduled=3,
        processed=120,
        failed=4,
        total_dead=2,
        total_broken=1,
        cancelled=1,
        purged=1,
    )
    assert tally(start, now) == Tally(done=75, left=18, failures=3, dead=2)
    assert tally(start, now).total == 93


def test_plain_line() -> None:
    line = plain_line("mailer", Tally(done=1200, left=800, failures=2, dead=1), 400.0)
    assert line == "mailer: 1200/2000 done, 400 jobs/s, ETA 2s, 2 failed, 1 dead"
    assert "ETA -" in plain_line("mailer", Tally(0, 10, 0, 0), 0.0)


def test_watch_drain_stops_when_nothing_is_left_or_at_the_timeout() -> None:
    samples = iter([stats(ready=3), stats(ready=2, processed=1), stats(processed=3)])
    out = io.StringIO()  # not a terminal: plain lines
    view = make_view("q", out, plain_every_s=0)
    final = watch_drain(
        lambda: next(samples), view, interval_s=0.01, timeout_s=None, sleep=lambda s: None
    )
    assert final == Tally(done=3, left=0, failures=0, dead=0)
    assert out.getvalue().splitlines()[-1].startswith("q: 3/3 done")
    stuck: Any = lambda: stats(ready=3)  # noqa: E731
    assert (
        watch_drain(
            stuck,
            make_view("q", io.StringIO()),
            interval_s=0.01,
            timeout_s=0.0,
            sleep=lambda s: None,
        )
        is None
    )


class Recorder:
    """A view that keeps what it was shown."""

    def __init__(self) -> None:
        self.shown: list[tuple[Tally, bool]] = []
        self.closed = False

    def update(self, t: Tally, rate: float, final: bool = False) -> None:
        self.shown.append((t, final))

    def close(self) -> None:
        self.closed = True


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_count_view_shows_done_of_total_and_closes() -> None:
    view = Recorder()
    with CountView(view, 10) as shown:
        shown.update(4, failures=1)
        shown.update(10, final=True)
    assert view.shown == [(Tally(4, 6, 1, 0), False), (Tally(10, 0, 0, 0), True)]
    assert view.closed
    view = Recorder()
    with pytest.raises(RuntimeError), CountView(view, 10):  # a drain that failed
        raise RuntimeError
    assert view.closed


def test_count_view_draws_plain_lines_and_rich_bars() -> None:
    out = io.StringIO()
    with CountView(make_view("c2", out, plain_every_s=0), 10) as shown:
        shown.update(3)
        shown.update(10, final=True)
    first, last = out.getvalue().splitlines()
    assert first == "c2: 3/10 done, 0 jobs/s, ETA -, 0 failed, 0 dead"
    assert last.startswith("c2: 10/10 done, ")

    pytest.importorskip("rich")
    out = Terminal()
    view = make_view("c2warm", out)
    with CountView(view, 3000) as shown:
        shown.update(1200)
        shown.update(3000, final=True)
    assert "c2warm" in out.getvalue() and "3000/3000" in out.getvalue()
    assert not view.progress.live.is_started  # closed: the terminal is handed back


def test_the_last_rate_of_a_drain_shorter_than_a_sample_is_its_mean() -> None:
    rate = Rate(every_s=60.0)
    time.sleep(0.01)
    assert rate.sample(5) == 0.0  # too soon for a sample
    assert rate.sample(10, force=True) > 0
