"""Schedules of periodic jobs and their next-fire math (no Redis), and what
``@app.periodic`` refuses at registration."""

from __future__ import annotations

import math
import sys
import time
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

import fastq
from fastq.periodic import Schedule, make_schedule

BERLIN = ZoneInfo("Europe/Berlin")


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def local(slots: list[int], tz: Any = BERLIN) -> list[str]:
    return [datetime.fromtimestamp(s / 1000, tz).isoformat() for s in slots]


def test_every_s_slots_are_multiples_since_the_epoch() -> None:
    s = make_schedule(every_s=300)
    t = ms(datetime(2026, 1, 1, 10, 3, 7, tzinfo=timezone.utc))
    assert local(s.upcoming(t, 3), timezone.utc) == [
        "2026-01-01T10:05:00+00:00",
        "2026-01-01T10:10:00+00:00",
        "2026-01-01T10:15:00+00:00",
    ]
    assert s.next_after_ms(t // 300_000 * 300_000) == (t // 300_000 + 1) * 300_000  # strictly after


def test_missed_slots_collapse_into_the_latest() -> None:
    s = make_schedule(every_s=60)
    start = ms(datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert s.latest_ms(start, start + 10 * 60_000 + 5) == start + 10 * 60_000
    assert s.latest_ms(start, start + 59_999) == start
    c = make_schedule(cron="*/5 * * * *")
    assert c.latest_ms(start, start + 23 * 60_000) == start + 20 * 60_000


@pytest.mark.parametrize(
    ("expr", "start"),
    [
        ("30 2 * * *", datetime(2025, 3, 28, tzinfo=BERLIN)),  # spring forward, 30 March
        ("30 2 * * *", datetime(2025, 10, 24, tzinfo=BERLIN)),  # fall back, 26 October
        ("*/20 * * * *", datetime(2025, 3, 30, 0, 30, tzinfo=BERLIN)),
        ("*/20 * * * *", datetime(2025, 10, 26, 1, 30, tzinfo=BERLIN)),
        ("15 1-3 * * *", datetime(2025, 10, 25, tzinfo=BERLIN)),
        ("0 9 * MAR,OCT SUN", datetime(2025, 3, 1, tzinfo=BERLIN)),
    ],
)
def test_cron_fire_times_match_the_library_across_a_dst_change(expr: str, start: datetime) -> None:
    s = make_schedule(cron=expr, tz="Europe/Berlin")
    ours = s.upcoming(ms(start), 12)
    it = CronSim(expr, start)
    theirs = [ms(next(it)) for _ in range(12)]
    assert ours == theirs
    assert ours == sorted(set(ours))  # distinct instants, in order


def test_dst_follows_debian_cron() -> None:
    s = make_schedule(cron="30 2 * * *", tz="Europe/Berlin")
    spring = s.upcoming(ms(datetime(2025, 3, 29, 3, tzinfo=BERLIN)), 2)
    # 02:30 does not exist on 30 March: the job runs right after the change
    assert local(spring) == ["2025-03-30T03:00:00+02:00", "2025-03-31T02:30:00+02:00"]
    fall = s.upcoming(ms(datetime(2025, 10, 25, 3, tzinfo=BERLIN)), 2)
    # 02:30 happens twice on 26 October: the job runs once
    assert local(fall) == ["2025-10-26T02:30:00+02:00", "2025-10-27T02:30:00+01:00"]
    # from inside the repeated hour, the next slot is the next day's, not one passed
    inside = ms(datetime(2025, 10, 26, 2, 40, tzinfo=BERLIN, fold=1))
    assert local([s.next_after_ms(inside)]) == ["2025-10-27T02:30:00+01:00"]
    # a schedule of finer granularity follows the clock: both 02:00s run
    hourly = make_schedule(cron="0 * * * *", tz="Europe/Berlin")
    start = ms(datetime(2025, 10, 26, 1, 30, tzinfo=BERLIN))
    assert local(hourly.upcoming(start, 3)) == [
        "2025-10-26T02:00:00+02:00",
        "2025-10-26T02:00:00+01:00",
        "2025-10-26T03:00:00+01:00",
    ]


def test_names_ranges_steps_and_aliases() -> None:
    t = ms(datetime(2026, 1, 2, 12, tzinfo=timezone.utc))  # a Friday
    weekdays = make_schedule(cron="0 9 * jan-mar MON-fri")
    assert local(weekdays.upcoming(t, 2), timezone.utc) == [
        "2026-01-05T09:00:00+00:00",
        "2026-01-06T09:00:00+00:00",
    ]
    steps = make_schedule(cron="*/15 8-9 * * *")
    assert len(steps.upcoming(t, 8)) == 8
    assert local(steps.upcoming(t, 1), timezone.utc) == ["2026-01-03T08:00:00+00:00"]
    daily = make_schedule(cron="@daily", tz="America/New_York")
    assert local(daily.upcoming(t, 1), ZoneInfo("America/New_York")) == [
        "2026-01-03T00:00:00-05:00"
    ]


def test_a_year_of_downtime_catches_up_to_one_slot_quickly() -> None:
    s = make_schedule(cron="* * * * *", tz="Europe/Berlin")
    now = int(time.time() * 1000)
    start = s.next_after_ms(now - 365 * 86_400_000)
    began = time.perf_counter()
    assert s.latest_ms(start, now) == now // 60_000 * 60_000
    assert time.perf_counter() - began < 2.0


# -- registration -------------------------------------------------------------------


@pytest.fixture
def app() -> fastq.App:
    return fastq.App("redis://127.0.0.1:1/0", namespace="unit")  # never connected


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cron": "* * *"}, ValueError, "5 fields"),
        ({"cron": "0 * * * * *"}, ValueError, "5 fields"),  # seconds: not standard cron
        ({"cron": "61 * * * *"}, ValueError, "invalid cron expression '61"),
        ({"cron": "* 25 * * *"}, ValueError, "invalid cron expression"),
        ({"cron": "0 0 * * FUNDAY"}, ValueError, "invalid cron expression"),
        ({"cron": "0 0 31 FEB *"}, ValueError, "cron expression"),
        ({"cron": "@sometimes"}, ValueError, "5 fields"),
        ({"cron": 5}, TypeError, "cron must be a str"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, ValueError, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "../etc/passwd"}, ValueError, "unknown time zone"),
        ({"cron": "* * * * *", "tz": 2}, TypeError, "tz must be"),
        ({"every_s": 0}, ValueError, "every_s must be"),
        ({"every_s": -5}, ValueError, "every_s must be"),
        ({"every_s": 0.5}, ValueError, "every_s must be"),
        ({"every_s": math.nan}, ValueError, "every_s must be"),
        ({"every_s": math.inf}, ValueError, "every_s must be"),
        ({"every_s": True}, TypeError, "every_s must be"),
        ({"every_s": "60"}, TypeError, "every_s must be"),
        ({"every_s": 60, "cron": "* * * * *"}, ValueError, "not both"),
        ({}, ValueError, "not neither"),
        ({"every_s": 60, "tz": "Europe/Berlin"}, ValueError, "tz= applies to cron"),
        ({"every_s": 60, "args": (1, 2)}, TypeError, "arguments do not fit"),
        ({"every_s": 60, "args": ({1, 2},)}, TypeError, r"args\[0\] is a set: "),
        ({"every_s": 60, "args": (math.nan,)}, TypeError, "JSON cannot carry NaN"),
        ({"every_s": 60, "overlap": "no"}, TypeError, "overlap must be a bool"),
        ({"every_s": 60, "queue": "a b"}, ValueError, "invalid queue name"),
    ],
)
def test_bad_schedules_are_refused_at_registration_and_nothing_registered(
    app: fastq.App, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    def tick(x: int = 0) -> None: ...

    with pytest.raises(error, match=message):
        app.periodic(**options)(tick)
    assert app.registry == {} and app.schedules == {}


def test_a_registered_job_can_be_scheduled_and_still_enqueued_by_hand(app: fastq.App) -> None:
    @app.periodic(cron="0 3 * * *", tz="Europe/Berlin", args=(7,))
    @app.job(queue="maint", priority=2)
    def vacuum(days: int) -> None: ...

    assert isinstance(vacuum, fastq.JobDef) and app.registry["vacuum"] is vacuum
    job = app.schedules["vacuum"]
    assert (job.queue, job.priority, job.args, job.overlap) == ("maint", 2, (7,), False)
    assert app.job_queues() == ["maint"]
    with pytest.raises(ValueError, match="already has a schedule"):
        app.periodic(every_s=60)(vacuum)


def test_job_options_pass_through_to_the_job(app: fastq.App) -> None:
    @app.periodic(every_s=60, queue="reports", retries=0, name="nightly")
    def report() -> None: ...

    assert report.name == "nightly" and report.policy.retries == 0
    assert app.schedules["nightly"].queue == "reports"
    assert app.schedules["nightly"].run_id(1000) == "periodic:nightly:1000"


def test_a_name_unfit_for_an_id_gives_a_hashed_run_id(app: fastq.App) -> None:
    @app.periodic(every_s=60, name="rapport quotidien")
    def report() -> None: ...

    run_id = app.schedules["rapport quotidien"].run_id(1000)
    assert run_id.startswith("periodic:") and " " not in run_id and run_id.endswith(":1000")


def test_cron_without_cronsim_names_the_extra(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cronsim", None)
    with pytest.raises(ImportError, match=r"pip install 'fastq\[cron\]'"):
        app.periodic(cron="* * * * *")(lambda: None)
    assert app.registry == {}
    make_schedule(every_s=60)  # every_s needs no cronsim


def test_schedule_describes_itself() -> None:
    assert make_schedule(every_s=300).describe() == "every 300s"
    assert make_schedule(cron="@hourly", tz="Europe/Berlin").describe() == (
        "cron '0 * * * *' Europe/Berlin"
    )
    assert Schedule(every_ms=1500).describe() == "every 1.5s"
