"""A worker's options are declared once (``WorkerOptions``): checked when made, taken
by ``Worker`` whole or one keyword at a time, and under their old names with a
DeprecationWarning."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import fastq
from fastq.worker.options import WorkerOptions
from fastq.worker.worker import Worker


@pytest.fixture
def app() -> fastq.App:
    return fastq.App("redis://127.0.0.1:1/0", namespace="unit")  # never connected


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 0}, "batch size must be within 1..1000, not 0"),
        ({"batch_size": 1001}, "batch size must be within 1..1000"),
        ({"lease_s": 0}, "lease_s must be > 0"),
        ({"burst_horizon_s": float("inf")}, "burst_horizon_s must be a finite number >= 0"),
        ({"burst_horizon_s": -1}, "burst_horizon_s"),
        ({"async_jobs": 0}, "async_jobs must be >= 1, not 0"),
        ({"threads": -1}, "threads must be >= 0, not -1"),
    ],
)
def test_a_bad_option_is_refused_when_the_options_are_made(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        WorkerOptions(**changes)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        WorkerOptions().with_changes(**changes)


def test_options_are_frozen_and_changed_by_copy() -> None:
    options = WorkerOptions(batch_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 20  # type: ignore[misc]
    assert options.with_changes(burst=True) == WorkerOptions(batch_size=10, burst=True)
    assert options.with_changes() is options


def test_a_keyword_that_names_no_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown worker option 'batch'"):
        WorkerOptions().with_changes(batch=10)


def test_a_burst_worker_waits_30_s_for_redis_by_default_others_forever() -> None:
    assert WorkerOptions().patience_s is None
    assert WorkerOptions(burst=True).patience_s == 30.0
    assert WorkerOptions(burst=True, redis_patience_s=2.0).patience_s == 2.0


def test_a_worker_takes_options_whole_and_keywords_on_top(app: fastq.App) -> None:
    options = WorkerOptions(batch_size=10, lease_s=30.0)
    worker = Worker(app, ["q"], options, burst=True, handle_signals=False)
    assert worker.options == WorkerOptions(batch_size=10, lease_s=30.0, burst=True)
    assert worker.lease_ms == 30_000
    assert Worker(app, ["q"], batch_size=7).options == WorkerOptions(batch_size=7)
    with pytest.raises(ValueError, match="lease_s must be > 0"):
        Worker(app, ["q"], lease_s=0)


def test_concurrency_the_old_name_of_async_jobs_still_works_with_a_deprecation_warning(
    app: fastq.App,
) -> None:
    with pytest.warns(DeprecationWarning, match="concurrency= is deprecated: it is async_jobs="):
        worker = Worker(app, ["q"], concurrency=3, handle_signals=False)
    assert worker.options.async_jobs == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns of nothing
        assert Worker(app, ["q"], async_jobs=3).options.async_jobs == 3
