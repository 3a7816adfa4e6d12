"""The native runner loop (fastq_ext.runner) against its reference (fastq._pyimpl.runner).

The same batches run through ``SyncRunner.run`` with each loop: the same outcomes
(done, retried, buried, kept results, unstarted, stalled, interrupted), the same
exception, the same job context and heartbeat slot seen by each job. No Redis needed.
"""

from __future__ import annotations

import time
import types
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastq
from fastq import context
from fastq._accel import codec
from fastq._pyimpl import runner as ref_runner
from fastq.errors import Fail, Retry
from fastq.protocol.outcomes import Outcomes
from fastq.runners import settle
from fastq.runners import sync as runner
from fastq.runners.sync import HardStop, SyncRunner
from fastq.shm.heartbeat import HeartbeatBoard
from fastq_ext import runner as native_runner
from tests.support.examples import examples

LOOPS = {"native": native_runner, "reference": ref_runner}

app = fastq.App("redis://127.0.0.1:1/0", namespace="runner-vs")
owner = types.SimpleNamespace(stopping=False)
seen: list[Any] = []  # what each job saw: its context and the master's view of its slot
board = HeartbeatBoard(1)


def _note() -> None:
    job = fastq.current_job()
    running = board.slot(0).running()
    seen.append((job.id, job.attempt, running and (running[0], running[1], running[3] > 0)))


@app.job(name="ok", queue="q")
def ok(i: int) -> None:
    _note()


@app.job(name="value", queue="q")
def value(i: int) -> int:
    _note()
    return i


@app.job(name="boom", queue="q", retries=1)
def boom(i: int) -> None:
    _note()
    raise ValueError(f"boom {i}")


@app.job(name="retry", queue="q")
def retry(i: int) -> Retry:
    _note()
    return Retry(delay_s=3)


@app.job(name="fail", queue="q")
def fail(i: int) -> None:
    _note()
    raise Fail("no")


@app.job(name="stop", queue="q")
def stop(i: int) -> None:
    _note()
    owner.stopping = True


@app.job(name="exit", queue="q")
def exit_(i: int) -> None:
    _note()
    raise SystemExit(3)


@app.job(name="hard", queue="q")
def hard(i: int) -> None:
    _note()
    raise HardStop()


@app.job(name="timed", queue="q", timeout_s=30)
def timed(i: int) -> None:
    _note()


@app.job(name="kept", queue="q", result_ttl_s=60)
def kept(i: int) -> dict[str, int]:
    _note()
    return {"i": i}


@app.job(name="unkeepable", queue="q", result_ttl_s=60)
def unkeepable(i: int) -> object:
    _note()
    return object()


JOBS = [ok, value, boom, retry, fail, stop, exit_, hard, timed, kept, unkeepable]


def runnable_of(kinds: list[int], long_id: bool = False) -> list[Any]:
    batch = []
    for i, kind in enumerate(kinds):
        job = JOBS[kind]
        job_id = (b"x" * 300 if long_id and i == 0 else b"") + b"job-%d" % i
        env = {"n": job.name, "a": [i], "t": 1}
        batch.append((job_id, job, [i], {}, 1 + i % 2, env))
    # one call whose arguments do not fit: the TypeError is the policy's
    batch.append((b"job-bad", ok, [1, 2, 3], {}, 1, {"n": "ok", "a": [1, 2, 3], "t": 1}))
    return batch


def run_with(
    loop: types.ModuleType, kinds: list[int], monkeypatch: pytest.MonkeyPatch, long_id: bool
) -> tuple[Any, ...]:
    monkeypatch.setattr(runner, "_loop", loop)
    monkeypatch.setattr(settle, "draw", lambda: 0.5)  # jitter fixed
    owner.stopping = False
    seen.clear()
    slot = board.slot(0)
    slot.reset()
    out = Outcomes()
    sync = SyncRunner(owner, slot)  # type: ignore[arg-type]
    raised: Optional[type[BaseException]] = None
    ran = -1
    try:
        ran = sync.run(runnable_of(kinds, long_id), out, 3, "q")
    except BaseException as exc:  # noqa: BLE001 - compared between the loops
        raised = type(exc)
    if raised is SystemExit:  # the worker goes down with the job: the master's slot names it
        running = slot.running()
        assert running is not None and [running[1] or out.stalled[0]] == out.stalled
        assert out.stalled_cause == "exited: the job raised SystemExit(3)"
    else:
        assert slot.running() is None, "the slot is idle after a batch"
    assert context._current.get() is None, "the job context is left after a batch"
    assert set(out.runs) <= set(out.done)
    return (
        ran,
        raised,
        list(seen),
        out.done,
        [(r[0], r[1]) for r in out.retry],
        [d[0] for d in out.dead],
        out.broken,
        out.unstarted,
        out.stalled,
        out.interrupted,
        out.results,
        out.failed,
        slot.finished_unacked(),
        attempts_of(out),
    )


def attempts_of(out: Outcomes) -> dict[bytes, int]:
    """The attempt of each done job past its first (not its run time, which varies:
    a first run is named only when it took 1 ms or more, which one loop may and the
    other not), each run time checked a whole number of ms."""
    attempts = {}
    for job_id, run in out.runs.items():
        run_ms, attempt = run if type(run) is tuple else (run, 1)
        assert type(run_ms) is int and run_ms >= 0 and (attempt > 1 or run_ms > 0)
        if attempt > 1:
            attempts[job_id] = attempt
    return attempts


@settings(
    max_examples=examples(120),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(kinds=st.lists(st.integers(0, len(JOBS) - 1), max_size=12), long_id=st.booleans())
def test_native_loop_matches_reference(
    kinds: list[int], long_id: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    native = run_with(native_runner, kinds, monkeypatch, long_id)
    reference = run_with(ref_runner, kinds, monkeypatch, long_id)
    assert native == reference


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_plain_batch_outcomes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every outcome once, then a stop: what a user relies on, with either loop."""
    kinds = [0, 1, 2, 3, 4, 8, 9, 5, 0, 0]
    outcome = run_with(LOOPS[name], kinds, monkeypatch, long_id=False)
    ran, raised, saw, done, retried, dead, broken, unstarted, stalled, interrupted, results = (
        outcome[:11]
    )
    ring, attempts = outcome[-2:]
    assert (ran, raised) == (8, None)
    # the runs of done jobs not on their first attempt (and of any that took a ms)
    assert {j: a for j, a in attempts.items() if a > 1} == {b"job-1": 2, b"job-5": 2, b"job-7": 2}
    assert done == [b"job-0", b"job-1", b"job-5", b"job-6", b"job-7"]
    assert retried == [(b"job-2", 750), (b"job-3", 3000)]
    assert dead == [b"job-4"]
    assert unstarted == [b"job-8", b"job-9", b"job-bad"]
    assert (broken, stalled, interrupted) == ([], [], [])
    assert [r[0] for r in results] == [b"job-6"]
    # the master's ring of finished jobs: the done ones, but one whose result is kept
    # (its result goes out with its ack: a kill before re-runs it)
    assert ring == [(3, b"job-0"), (3, b"job-1"), (3, b"job-5"), (3, b"job-7")]
    # each job saw its own context and the slot naming it (a deadline only with timeout_s)
    assert saw[0] == ("job-0", 1, (3, b"job-0", False))
    assert saw[5] == ("job-5", 2, (3, b"job-5", True))
    assert len(saw) == 8


@app.job(name="slow", queue="q")
def slow(i: int) -> None:
    time.sleep(0.03)


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_done_job_notes_its_run_time_and_attempt(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "_loop", LOOPS[name])
    owner.stopping = False
    out = Outcomes()
    batch = [
        (b"s1", slow, [1], {}, 1, {}),
        (b"s2", slow, [2], {}, 4, {}),
        (b"o", ok, [3], {}, 1, {}),
    ]
    assert SyncRunner(owner, None).run(batch, out, 0, "q") == 3  # type: ignore[arg-type]
    assert out.done == [b"s1", b"s2", b"o"]
    s1, (s2, attempt) = out.runs[b"s1"], out.runs[b"s2"]
    assert 30 <= s1 < 2000 and 30 <= s2 < 2000 and attempt == 4
    # what the ack carries for their records: a no-op's first run is '' (0 ms)
    runs = codec.encode_runs(out.done, out.runs).split(b",")
    # a no-op's first run is '' (0 ms, not noted) or, when the machine is busy, its ms
    o = out.runs.get(b"o")
    assert runs == [b"%d" % s1, b"%d:4" % s2, b"" if o is None else b"%d" % o]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_base_exceptions_place_the_job_in_hand(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    *_, unstarted, stalled, interrupted, _, _, _, _ = run_with(
        LOOPS[name], [0, 6, 0], monkeypatch, long_id=False
    )
    assert (stalled, interrupted, unstarted) == ([b"job-1"], [], [b"job-2", b"job-bad"])
    ran, raised, *_, unstarted, stalled, interrupted, _, _, _, _ = run_with(
        LOOPS[name], [0, 7, 0], monkeypatch, long_id=False
    )
    assert (ran, raised) == (-1, HardStop)
    assert (stalled, interrupted, unstarted) == ([], [b"job-1"], [b"job-2", b"job-bad"])


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_rest_is_cut_only_behind_the_job_still_in_hand(name: str) -> None:
    """hand_back_rest (the lease keeper's thread, fastq.worker.mates): the jobs after
    the job in hand, if it is still in hand; nothing once the loop moved on."""
    batch = [b"a", b"b", b"c", b"d"]
    cursor = context.BatchCursor("q", list(batch), None)
    cursor.index = 1
    loop = LOOPS[name]
    assert loop.hand_back_rest(cursor, 2) == []  # the loop is not there (any more)
    assert cursor.runnable == batch
    assert loop.hand_back_rest(cursor, 1) == [b"c", b"d"]
    assert cursor.runnable == [b"a", b"b"]
    assert loop.hand_back_rest(cursor, 1) == []  # nothing left behind it


def test_a_batch_run_uncuttable_is_never_offered_to_the_long_job_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of taken at-most-once jobs (fastq.worker.atmostonce) runs with
    cuttable=False: the long-job watch's thread never sees its cursor, so no taken
    job is cut (it would never be given back)."""
    owner.stopping = False
    sync = SyncRunner(owner, None)  # type: ignore[arg-type]
    seen: list[Any] = []
    monkeypatch.setattr(ok, "fn", lambda i: seen.append(sync.cursor))
    sync.run([(b"a", ok, [1], {}, 1, {}), (b"b", ok, [2], {}, 1, {})], Outcomes(), 0, "q")
    assert seen[0] is not None and seen[0].runnable[1][0] == b"b"
    seen.clear()
    sync.run([(b"c", ok, [3], {}, 1, {})], Outcomes(), 0, "q", cuttable=False)
    assert seen == [None]
