"""Which runners a worker gets: built by one factory from the app and its options
(no Redis: the runners start only in ``slots.start()``)."""

from __future__ import annotations

from typing import Any

import pytest

import fastq
from fastq.runners.aio import AsyncRunner
from fastq.runners.factory import build_runners
from fastq.runners.mixed import Mixed
from fastq.runners.slots import RunToCompletion
from fastq.runners.threads import ThreadRunner


class Owner:
    stopping = False


def apps() -> tuple[fastq.App, fastq.App]:
    sync_only, both = fastq.App(namespace="unit"), fastq.App(namespace="unit")

    def plain() -> None: ...

    async def awaited() -> None: ...

    sync_only.job(name="plain")(plain)
    both.job(name="plain")(plain)
    both.job(name="awaited")(awaited)
    return sync_only, both


def build(app: fastq.App, **options: Any) -> Any:
    options = {"concurrency": 1, "threads": 0, **options}
    return build_runners(
        Owner(),
        lambda: "w",
        app.registry.values(),
        app.hooks,
        slot=None,
        progress=None,
        metrics=None,
        max_claim=100,
        **options,
    )


def test_a_sync_app_without_threads_runs_its_batches_to_completion() -> None:
    sync_only, _ = apps()
    runners = build(sync_only)
    assert isinstance(runners.slots, RunToCompletion)
    assert runners.sync.hooks is sync_only.hooks


def test_async_jobs_or_a_concurrency_bring_an_event_loop() -> None:
    sync_only, both = apps()
    assert isinstance(build(both).slots, AsyncRunner)
    loop = build(sync_only, concurrency=8).slots
    assert isinstance(loop, AsyncRunner) and loop.concurrency == 8


def test_threads_bring_a_thread_pool_and_with_an_event_loop_one_runner_of_both() -> None:
    sync_only, both = apps()
    pool = build(sync_only, threads=4).slots
    assert isinstance(pool, ThreadRunner) and (pool.threads, pool.record_base) == (4, 0)
    mixed = build(both, concurrency=3, threads=4).slots
    assert isinstance(mixed, Mixed)
    # the threads' records follow the event loop's, and both wait on one condition
    assert mixed.threads.record_base == 3 and mixed.threads._cond is mixed.loop.cond
    # every runner settles through the one sync runner (its gate, hooks, metrics)
    runners = build(both, concurrency=3, threads=4)
    assert runners.slots.loop.sync is runners.sync is runners.slots.threads.sync


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be >= 1, not 0"),
        ({"threads": -1}, "threads must be >= 0, not -1"),
    ],
)
def test_bad_options_are_refused(options: dict[str, int], message: str) -> None:
    sync_only, _ = apps()
    with pytest.raises(ValueError, match=message):
        build(sync_only, **options)
