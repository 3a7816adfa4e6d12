"""What a worker does with a job of a name its app lacks (fastq.worker.unknown):
back to the queue with a growing delay, its grace period counted on Redis' clock
from the first meeting, which the envelope carries; broken past it."""

from __future__ import annotations

import logging

import orjson
import pytest

from fastq.worker.unknown import MAX_DELAY_MS, UNKNOWN_SINCE, UnknownJobs, delay_ms

NOW = 1_800_000_000_000


def env(**more: object) -> dict[str, object]:
    return {"n": "welcome", "a": [1], "t": NOW - 50_000, **more}


def test_the_delay_starts_at_a_second_grows_by_half_and_is_capped() -> None:
    waited = 0
    delays = []
    while waited < 600_000:
        d = delay_ms(waited, 10**9)
        delays.append(d)
        waited += d
    assert delays[:3] == [1_000, 1_000, 1_000]
    assert all(b >= a for a, b in zip(delays, delays[1:]))
    assert max(delays) == MAX_DELAY_MS
    assert len(delays) < 40  # an old worker meets the job a few dozen times in 10 minutes
    # never past the grace period, never 0
    assert delay_ms(100_000, 250) == 250
    assert delay_ms(100_000, 0) == 1


def test_a_job_first_met_goes_back_with_the_time_it_was_met(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = UnknownJobs(300, "w1")
    with caplog.at_level(logging.WARNING, "fastq.worker"):
        retry, broken = jobs.sort([(b"j1", "welcome", env()), (b"j2", "welcome", env())], "q", NOW)
    assert broken == []
    assert [(job_id, delay) for job_id, delay, _ in retry] == [(b"j1", 1_000), (b"j2", 1_000)]
    written = orjson.loads(retry[0][2])
    assert written == ["welcome", [1], NOW - 50_000, {UNKNOWN_SINCE: NOW}]  # attempts untouched
    # one line for the name, however many of its jobs come, naming queue and job
    assert len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert "job name 'welcome' of queue q" in line and "job j1 is broken at " in line


def test_the_grace_counts_from_the_first_meeting_whoever_met_it() -> None:
    other = UnknownJobs(300, "w2")  # another worker, another host
    since = NOW - 20_000
    retry, broken = other.sort([(b"j1", "welcome", env(**{UNKNOWN_SINCE: since}))], "q", NOW)
    assert broken == [] and retry[0][1] == 10_000  # half what it waited
    assert orjson.loads(retry[0][2])[3] == {UNKNOWN_SINCE: since}
    retry, broken = other.sort(
        [(b"j1", "welcome", env(attempts=2, **{UNKNOWN_SINCE: NOW - 300_000}))], "q", NOW
    )
    assert retry == []
    assert broken == [
        (
            b"j1",
            "unknown job name 'welcome': not registered by the workers that claimed it in "
            "300 s (the grace period, unknown_job_grace_s, is 300 s)",
        )
    ]


def test_a_bogus_or_future_time_starts_the_grace_afresh() -> None:
    jobs = UnknownJobs(60, "w")
    for bogus in (NOW + 10_000, "yesterday", None, 1.5):
        retry, broken = jobs.sort([(b"j", "welcome", env(**{UNKNOWN_SINCE: bogus}))], "q", NOW)
        assert broken == [] and orjson.loads(retry[0][2])[3] == {UNKNOWN_SINCE: NOW}


def test_no_grace_breaks_at_once_as_before() -> None:
    retry, broken = UnknownJobs(0, "w").sort([(b"j", "welcome", env())], "q", NOW)
    assert retry == [] and broken == [(b"j", "unknown job name 'welcome'")]


def test_the_format_before_stays_an_object() -> None:
    old = {"id": "x", "name": "welcome", "args": [], "kwargs": {}}
    retry, _ = UnknownJobs(60, "w").sort([(b"j", "welcome", dict(old))], "q", NOW)
    assert orjson.loads(retry[0][2]) == {**old, UNKNOWN_SINCE: NOW}


@pytest.mark.parametrize("grace", [-1, float("inf"), float("nan"), "5m"])
def test_a_bad_grace_is_refused(grace: object) -> None:
    with pytest.raises((TypeError, ValueError), match="unknown_job_grace_s"):
        UnknownJobs(grace, "w")  # type: ignore[arg-type]
