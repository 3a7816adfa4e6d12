"""Bad retry settings are refused where they are given, with a clear error, and
nothing reaches Redis: at ``@app.job`` (the job is not registered), at the enqueue
call (no key written), or when a policy is made."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

import fastq
from tests.support.keys import namespace_keys

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"backoff_s": -1}, ValueError, "backoff_s must be a finite number of seconds"),
        ({"backoff_s": INF}, ValueError, "backoff_s must be a finite"),
        ({"max_backoff_s": NAN}, ValueError, "max_backoff_s must be a finite"),
        ({"backoff_s": "1"}, TypeError, "backoff_s must be a number of seconds"),
        ({"jitter": 1.5}, ValueError, r"jitter must be within \[0, 1\]"),
        ({"jitter": NAN}, ValueError, "jitter must be finite"),
        ({"retries": -1}, ValueError, "retries must be within"),
        ({"retries": 2.0}, TypeError, "retries must be an int"),
        ({"age_limit_s": 0}, ValueError, r"age_limit_s must be within \(0, "),
        ({"age_limit_s": -5}, ValueError, "age_limit_s must be within"),
        ({"age_limit_s": INF}, ValueError, "age_limit_s must be finite"),
        ({"age_limit_s": NAN}, ValueError, "age_limit_s must be finite"),
        ({"age_limit_s": True}, TypeError, "age_limit_s must be a number"),
        ({"retry_delays_s": []}, ValueError, "retry_delays_s must hold at least one delay"),
        ({"retry_delays_s": [1, -1]}, ValueError, r"retry_delays_s\[1\] must be a finite"),
        ({"retry_delays_s": [1, INF]}, ValueError, r"retry_delays_s\[1\] must be a finite"),
        ({"retry_delays_s": "1,2"}, TypeError, "retry_delays_s must be a list of seconds"),
        ({"retry_delays_s": [1] * 101}, ValueError, "more than 100"),
        (
            {"retry_delays_s": [1, 10], "backoff_s": 2},
            ValueError,
            "retry_delays_s lists every delay: backoff_s cannot go with it",
        ),
        (
            {"retry": fastq.Polynomial(), "jitter": 0.1},
            ValueError,
            "retry= gives the whole policy: jitter cannot go with it",
        ),
        (
            {"retry": fastq.Polynomial(), "retry_delays_s": [1]},
            ValueError,
            "retry= gives the whole policy: retry_delays_s",
        ),
        ({"retry": "polynomial"}, TypeError, "retry must be a policy such as"),
        ({"fail_on": ("KeyError",)}, TypeError, "fail_on must be a tuple of exception classes"),
        ({"retry_on": (42,)}, TypeError, "retry_on must be a tuple of exception classes"),
    ],
)
def test_bad_job_options_are_refused_at_registration(
    app: fastq.App, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):

        @app.job(queue="q", **options)
        def send() -> None: ...

    assert "send" not in app.registry


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: fastq.Geometric(1, ratio=0.5), ValueError, "ratio must be >= 1"),
        (lambda: fastq.Geometric(1, ratio=INF), ValueError, "ratio must be finite"),
        (lambda: fastq.Geometric(1, ratio=NAN), ValueError, "ratio must be finite"),
        (lambda: fastq.Geometric(-1, ratio=2), ValueError, "backoff_s must be a finite"),
        (lambda: fastq.BoundedDoubling(1, 10, -1), ValueError, "max_doublings must be within"),
        (lambda: fastq.BoundedDoubling(1, 10, 63), ValueError, "max_doublings must be within"),
        (lambda: fastq.BoundedDoubling(1, 10, 2.0), TypeError, "max_doublings must be an int"),
        (lambda: fastq.BoundedDoubling(20, 10, 2), ValueError, "must not exceed max_backoff_s"),
        (lambda: fastq.BoundedDoubling(INF, INF, 2), ValueError, "min_backoff_s must be a finite"),
        (lambda: fastq.Polynomial(max_backoff_s=-1), ValueError, "max_backoff_s must be a finite"),
        (lambda: fastq.Exponential(jitter=-0.1), ValueError, "jitter must be within"),
        (lambda: fastq.Delays([]), ValueError, "at least one delay"),
        (lambda: fastq.Delays([NAN]), ValueError, r"retry_delays_s\[0\] must be a finite"),
        (lambda: fastq.Retry(delay_s=INF), ValueError, "Retry delay_s must be a finite"),
        (lambda: fastq.Retry(delay_s=-1), ValueError, "Retry delay_s must be a finite"),
    ],
)
def test_bad_policies_are_refused_when_made(
    make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"age_limit_s": 0}, ValueError, "age_limit_s must be within"),
        ({"age_limit_s": NAN}, ValueError, "age_limit_s must be finite"),
        ({"retries": -1}, ValueError, "retries must be within"),
        ({"retries": True}, TypeError, "retries must be an int"),
        ({"retry": [1, 10]}, TypeError, "retry must be a policy such as"),
    ],
)
def test_bad_enqueue_overrides_write_nothing(
    app: fastq.App,
    r: redis.Redis,
    namespace: str,
    options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    @app.job(queue="q")
    def send(to: str) -> None: ...

    with pytest.raises(error, match=message):
        send.enqueue_with(**options)
    with pytest.raises(error, match=message):
        send.enqueue_many([("a",)], **options)
    with pytest.raises(error, match=message):
        app.enqueue("send", ["a"], **options)
    with pytest.raises(error, match=message):
        app.enqueue_many("send", [("a",)], **options)
    assert namespace_keys(r, namespace) == []
