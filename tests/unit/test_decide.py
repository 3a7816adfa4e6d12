"""The worker's decision after an empty claim, without Redis."""

from __future__ import annotations

import pytest

from fastq.worker.decide import ClaimFrom, EmptyClaims, Round, Sleep, Stop


def empty(claims: EmptyClaims, due_ms: int = -1, **kw: object) -> object:
    options = {"burst": False, "stopping": False, "idle_timeout_s": 5.0}
    options.update(kw)
    return claims.after_empty(1_000_000, due_ms, **options)  # type: ignore[arg-type]


def test_an_empty_queue_moves_on_to_the_next_until_every_queue_was_empty() -> None:
    claims = EmptyClaims(3)
    assert empty(claims) == ClaimFrom(1)
    assert empty(claims) == ClaimFrom(2)
    assert empty(claims) == Sleep(5.0)
    assert claims.index == 0  # the next round starts from the first queue


def test_a_batch_starts_again_from_the_first_queue() -> None:
    claims = EmptyClaims(3)
    assert empty(claims) == ClaimFrom(1)
    claims.got_jobs()
    assert empty(claims) == ClaimFrom(1)  # two more empty claims before any sleep
    assert empty(claims) == ClaimFrom(2)


def test_it_sleeps_until_the_earliest_due_job_any_queue_reported() -> None:
    claims = EmptyClaims(2)
    assert empty(claims, due_ms=1_000_900) == ClaimFrom(1)
    assert empty(claims, due_ms=1_000_250) == Sleep(0.25)
    assert empty(claims, due_ms=1_000_900) == ClaimFrom(1)  # a new round forgot 250
    assert empty(claims, due_ms=-1) == Sleep(0.9)


def test_a_job_due_now_or_past_is_claimed_after_a_millisecond() -> None:
    assert empty(EmptyClaims(1), due_ms=999_000) == Sleep(0.001)


def test_the_idle_timeout_bounds_a_far_due_time() -> None:
    assert empty(EmptyClaims(1), due_ms=9_000_000) == Sleep(5.0)


@pytest.mark.parametrize(
    ("burst", "stopping", "due_ms", "step"),
    [
        (True, False, -1, Stop()),
        (True, False, 1_000_500, Sleep(0.5)),  # a burst worker waits for a job due soon
        (False, True, 1_000_500, Stop(1_000_500)),
        (False, False, -1, Sleep(5.0)),
    ],
)
def test_stop_or_sleep(burst: bool, stopping: bool, due_ms: int, step: object) -> None:
    assert empty(EmptyClaims(1), due_ms=due_ms, burst=burst, stopping=stopping) == step


def test_no_stop_before_every_queue_was_tried() -> None:
    claims = EmptyClaims(2)
    assert empty(claims, burst=True, stopping=True) == ClaimFrom(1)
    assert empty(claims, burst=True, stopping=True) == Stop()


@pytest.mark.parametrize(
    ("due_ms", "horizon_s", "step"),
    [
        (1_000_999, 1.0, Sleep(0.999)),  # due within the horizon: waited for
        (1_001_000, 1.0, Sleep(1.0)),  # exactly at the horizon: still waited for
        (1_001_001, 1.0, Stop(1_001_001)),  # beyond it: left scheduled, and said so
        (4_600_000, 1.0, Stop(4_600_000)),  # an hour away
        (1_004_000, 5.0, Sleep(4.0)),  # a longer horizon waits longer
        (1_000_000, 0.0, Sleep(0.001)),  # horizon 0: a job due now is still run
        (1_000_001, 0.0, Stop(1_000_001)),  # ... but not one a millisecond away
    ],
)
def test_a_burst_worker_waits_only_for_jobs_due_within_its_horizon(
    due_ms: int, horizon_s: float, step: object
) -> None:
    got = empty(EmptyClaims(1), due_ms=due_ms, burst=True, burst_horizon_s=horizon_s)
    assert got == step


def test_a_burst_worker_stops_on_the_earliest_due_time_of_all_its_queues() -> None:
    claims = EmptyClaims(2)
    assert empty(claims, due_ms=9_000_000, burst=True) == ClaimFrom(1)
    # the second queue has a job due in 0.3 s: the worker waits for it
    assert empty(claims, due_ms=1_000_300, burst=True) == Sleep(0.3)
    assert empty(claims, due_ms=9_000_000, burst=True) == ClaimFrom(1)
    assert empty(claims, due_ms=7_000_000, burst=True) == Stop(7_000_000)


def test_the_sleep_ends_when_redis_clock_reaches_the_due_millisecond() -> None:
    # Redis' clock to the microsecond: 0.3 ms before the job's millisecond begins
    step = EmptyClaims(1).after_empty(
        1_000_000.7, 1_000_001, burst=False, stopping=False, idle_timeout_s=5.0
    )
    assert isinstance(step, Sleep) and step.seconds == pytest.approx(0.0003)


def test_a_paused_queue_sleeps_until_a_wake_up_instead_of_spinning() -> None:
    claims = EmptyClaims(1)
    # a paused claim's due time is not waited for: only a resume lets it run
    assert empty(claims, due_ms=1_000_001, paused=True) == Sleep(5.0, paused=True)
    assert claims.index == 0


def test_a_paused_queue_does_not_hide_another_queues_due_job() -> None:
    claims = EmptyClaims(2)
    assert empty(claims, paused=True) == ClaimFrom(1)
    assert empty(claims, due_ms=1_000_250) == Sleep(0.25)
    assert empty(claims, paused=True) == ClaimFrom(1)
    assert empty(claims) == Sleep(5.0, paused=False)  # one queue is merely empty


def test_a_burst_worker_stops_on_a_paused_queue_rather_than_wait_for_a_resume() -> None:
    claims = EmptyClaims(1)
    assert empty(claims, due_ms=1_000_001, paused=True, burst=True) == Stop(-1)


def test_a_stopping_worker_stops_on_a_paused_queue() -> None:
    assert empty(EmptyClaims(1), paused=True, stopping=True) == Stop(-1)


# -- strict priority across queues: what each round trip asks for -------------------


def test_a_sweep_claims_one_queue_at_a_time_until_a_batch_comes() -> None:
    claims = EmptyClaims(4)
    assert claims.next_round() == Round(claim=range(0, 1))
    assert empty(claims) == ClaimFrom(1)
    assert claims.next_round() == Round(claim=range(1, 2))


def test_after_a_batch_of_the_last_queue_the_round_peeks_at_every_earlier_queue() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(3)
    # a, b, c looked at without a claim call, d claimed again
    assert claims.next_round() == Round(claim=range(3, 4), peek=range(0, 3))
    assert claims.index == 0  # a sweep after it starts from the first queue


def test_after_a_batch_of_the_first_queue_only_that_queue_is_claimed() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(0)
    assert claims.next_round() == Round(claim=range(0, 1), peek=range(0))


def test_work_a_peek_found_is_claimed_first_in_the_next_round() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(3)
    claims.next_round()
    claims.saw_work(1)  # the peek found work in b
    claims.got_jobs(3)  # and d's claim of the same round took a batch
    # every queue up to d claimed, read in order: b's batch before d's
    assert claims.next_round() == Round(claim=range(0, 4))


def test_the_first_queue_that_gave_work_in_a_round_bounds_the_next_round() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(3)
    claims.next_round()
    # b had work, and d's claim of the same round took a batch too: both run,
    # but the next round stops at b (d waits until b is empty)
    claims.got_jobs(1)
    claims.got_jobs(3)
    assert claims.next_round() == Round(claim=range(1, 2), peek=range(0, 1))


def test_a_round_is_planned_once_then_the_sweep_goes_on_one_queue_at_a_time() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(2)
    claims.saw_work(0)
    assert claims.next_round() == Round(claim=range(0, 3))
    # no batch and no peek since: the sweep from the first queue
    assert claims.next_round() == Round(claim=range(0, 1))


def test_a_peek_at_a_later_queue_than_the_batch_changes_nothing() -> None:
    claims = EmptyClaims(4)
    claims.got_jobs(1)
    claims.saw_work(2)  # cannot come from a peek of queues before 1; ignored
    assert claims.next_round() == Round(claim=range(1, 2), peek=range(0, 1))


def test_empty_replies_of_a_round_count_in_order_towards_the_sleep() -> None:
    claims = EmptyClaims(3)
    claims.got_jobs(2)
    claims.saw_work(0)
    assert claims.next_round() == Round(claim=range(0, 3))
    assert empty(claims, queue_index=0) == ClaimFrom(1)
    assert empty(claims, queue_index=1) == ClaimFrom(2)
    assert empty(claims, queue_index=2, burst=True) == Stop()


def test_a_reply_out_of_the_sweep_order_does_not_count() -> None:
    claims = EmptyClaims(3)
    claims.got_jobs(2)
    claims.next_round()  # a peek at 0 and 1, a claim of 2
    # 2 came back empty: 0 and 1 were only peeked at, so this is no sweep of
    # them; the worker must not stop with them unclaimed
    assert empty(claims, queue_index=2, burst=True) == ClaimFrom(0)
    assert claims.in_a_row == 0
    assert claims.next_round() == Round(claim=range(0, 1))
