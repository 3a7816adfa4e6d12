"""A pool whose children hold many jobs in flight at once, under faults, run once
per runner: ``async def`` jobs (``--async-jobs N``) and jobs in threads
(``--threads N``). Children SIGKILLed mid-drain, a graceful stop mid-drain, a
hard stop.

The contract is the pool's: each job ran at least once, none was lost, none ran
twice after a graceful stop, and re-runs stay within what the killed children
held (at most N in flight each: a child never claims more than its free slots).
What only one runner does is tested in test_async_pool.py and test_thread_pool.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import redis

import fastq
from tests.support.pool import Pool, drain_while_killing_children, runs, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]


@dataclass(frozen=True)
class Runner:
    """How a child runs its jobs, and the sizes each test here uses for it."""

    name: str
    app: str  # the test app whose ``work(i, seconds)`` job runs on this runner
    flag: str  # the pool option that sets a child's slots on this runner
    kill_jobs: int
    kill_slots: int
    kill_job_s: float
    graceful_jobs: int
    graceful_slots: int
    hard_stop_jobs: int
    hard_stop_slots: int
    # what a child logs as a hard stop hands back its jobs: the loop cancels its
    # own; a thread cannot be stopped, so its job is handed back still running
    hard_stop_log: str

    def pool_args(self, slots: int) -> tuple[str, ...]:
        return ("--app", self.app, "-c", "2", self.flag, str(slots))


# The SIGKILL test's jobs set how long its drain lasts, not fastq's speed: 80% of
# them take 1.2 s (async) and 1.6 s (threads; 10 ms jobs took 0.8 s) at least on
# 2 children, twice the 2 kills' 0.6 s (see drain_while_killing_children).
ASYNC = Runner(
    name="async",
    app="tests.apps.async_jobs",
    flag="--async-jobs",
    kill_jobs=6000,
    kill_slots=40,
    kill_job_s=0.02,
    graceful_jobs=4000,
    graceful_slots=50,
    hard_stop_jobs=200,
    hard_stop_slots=30,
    hard_stop_log="cancelling 30 jobs in flight",
)
THREADS = Runner(
    name="threads",
    app="tests.apps.thread_jobs",
    flag="--threads",
    kill_jobs=4000,
    kill_slots=20,
    kill_job_s=0.02,
    graceful_jobs=3000,
    graceful_slots=30,
    hard_stop_jobs=100,
    hard_stop_slots=10,
    hard_stop_log="10 jobs still running in threads",
)
each_runner = pytest.mark.parametrize("runner", [ASYNC, THREADS], ids=lambda runner: runner.name)


@each_runner
def test_sigkill_children_with_jobs_in_flight(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], runner: Runner
) -> None:
    n, slots = runner.kill_jobs, runner.kill_slots
    app.enqueue_many("work", [(i, runner.kill_job_s) for i in range(n)], queue="q")
    # a job handed back goes to the front and may be running at the next kill too:
    # enough stalls allowed that no job goes dead here (poison jobs: test_async_pool)
    pool = pools(*runner.pool_args(slots), "--batch", "20", "--max-stalls", "20")
    drain_while_killing_children(app, r, pool, n, slots)


@each_runner
def test_sigterm_mid_drain_waits_for_the_jobs_in_flight(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], runner: Runner
) -> None:
    n = runner.graceful_jobs
    app.enqueue_many("work", [(i, 0.05) for i in range(n)], queue="q")
    pool = pools(*runner.pool_args(runner.graceful_slots), "--graceful-timeout", "10")
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    stats = app.stats("q")
    assert set(ran.values()) == {1}, "a job ran twice"
    assert stats["processed"] == len(ran)
    assert stats["inflight"] == 0 and stats["ready"] == n - len(ran)
    assert "waiting for" in pool.log()  # there were jobs in flight at the stop


@each_runner
def test_a_hard_stop_hands_back_the_jobs_in_flight(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], runner: Runner
) -> None:
    n, held = runner.hard_stop_jobs, 2 * runner.hard_stop_slots
    app.enqueue_many("work", [(i, 60) for i in range(n)], queue="q")  # a minute each
    pool = pools(*runner.pool_args(runner.hard_stop_slots), "--graceful-timeout", "1")
    wait_until(lambda: app.stats("q")["inflight"] == held, 30, f"{held} jobs in flight")
    assert pool.stop() == 0, pool.log()
    stats = app.stats("q")
    assert (stats["processed"], stats["inflight"], stats["ready"], stats["stalled"]) == (
        0,
        0,
        n,
        0,
    ), pool.log()
    assert runner.hard_stop_log in pool.log()
