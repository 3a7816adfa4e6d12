"""The batch sizer, without Redis."""

from __future__ import annotations

from fastq.worker.sizer import (
    COVER_MAX_BATCH_S,
    COVER_MAX_FACTOR,
    COVER_MAX_N,
    COVER_ROUND_TRIPS,
    BatchSizer,
    QueueSizers,
)


def test_the_first_claim_is_of_one_job_then_the_size_doubles_to_the_cap() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    sizes = [sizer.n]
    for _ in range(10):
        sizer.ran(batch_s=sizer.n * 1e-5, jobs=sizer.n)  # 10 µs jobs
        sizes.append(sizer.n)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100, 100]


def test_slow_jobs_come_in_batches_of_about_the_target() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    for _ in range(20):
        sizer.ran(batch_s=sizer.n * 0.02, jobs=sizer.n)  # 20 ms jobs
    assert sizer.n == 5
    assert not sizer.prefetch_pays()  # 0.1 s batches are shared out, not prefetched


def test_quick_batches_prefetch() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    assert not sizer.prefetch_pays()  # nothing measured yet
    sizer.ran(batch_s=1e-5, jobs=1)
    assert sizer.prefetch_pays()


def test_a_long_idle_spell_starts_again_from_one_job_a_short_one_does_not() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    for _ in range(8):
        sizer.ran(batch_s=sizer.n * 1e-5, jobs=sizer.n)
    sizer.forget(idle_s=0.1)
    assert sizer.n == 100
    sizer.forget(idle_s=0.6)
    assert (sizer.n, sizer.job_s) == (1, 0.0)


def settle(sizer: BatchSizer, job_s: float, rtt_s: float, batches: int = 20) -> list[int]:
    """Run ``batches`` batches of ``job_s`` jobs over a round trip of ``rtt_s``."""
    sizes = []
    for _ in range(batches):
        sizer.ran(batch_s=sizer.n * job_s, jobs=sizer.n, rtt_s=rtt_s)
        sizes.append(sizer.n)
    return sizes


def test_quick_batches_grow_past_max_n_to_cover_the_round_trip() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    sizes = settle(sizer, job_s=1e-5, rtt_s=0.001)  # 10 µs jobs, Redis 1 ms away
    assert sizes[:8] == [2, 4, 8, 16, 32, 64, 128, 201]  # still doubling from one job
    assert sizer.n == int(COVER_ROUND_TRIPS * 0.001 / 1e-5) + 1 == 201
    assert sizer.n * sizer.job_s >= 0.001  # a batch outlasts the claim written ahead
    assert sizer.prefetch_pays()


def test_without_a_measured_round_trip_max_n_holds() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    settle(sizer, job_s=1e-5, rtt_s=0.0)
    assert sizer.n == 100


def test_a_grown_batch_stays_within_the_hard_cap() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    settle(sizer, job_s=1e-6, rtt_s=0.05)  # 1 µs jobs, a 50 ms round trip
    assert sizer.n == COVER_MAX_N == 1000
    small = BatchSizer(max_n=20, target_batch_s=0.1)
    settle(small, job_s=1e-6, rtt_s=0.05)
    assert small.n == COVER_MAX_FACTOR * 20 == 200


def test_a_grown_batch_stays_quick() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    settle(sizer, job_s=1e-4, rtt_s=0.05)  # 100 µs jobs, a 50 ms round trip
    assert sizer.n == int(COVER_MAX_BATCH_S / 1e-4) == 100  # 10 ms of work, not 100 ms
    assert sizer.prefetch_pays()


def test_slow_jobs_are_still_shared_out_however_far_redis_is() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    settle(sizer, job_s=0.02, rtt_s=0.05)  # 20 ms jobs, a 50 ms round trip
    assert sizer.n == 5  # as without a round trip
    assert not sizer.prefetch_pays()
    tiny_target = BatchSizer(max_n=100, target_batch_s=0.002)  # a lease of 8 ms
    settle(tiny_target, job_s=1e-5, rtt_s=0.05)
    assert tiny_target.n == 200  # 2 ms of work: the target still bounds a grown batch


def test_a_long_idle_spell_keeps_the_round_trip_but_measures_the_jobs_afresh() -> None:
    sizer = BatchSizer(max_n=100, target_batch_s=0.1)
    settle(sizer, job_s=1e-5, rtt_s=0.001)
    sizer.forget(idle_s=0.6)
    assert sizer.n == 1
    assert settle(sizer, job_s=0.02, rtt_s=0.001, batches=3) == [2, 4, 5]  # slow now: small


def test_a_batch_past_max_n_never_holds_more_than_the_cap_of_work() -> None:
    """What bounds the wait of work arriving in an earlier queue (fastq.worker.decide): a
    batch holds at most max_n jobs, or past it at most COVER_MAX_BATCH_S of work,
    whatever the jobs and the round trip."""
    for job_s in (1e-7, 1e-6, 1e-5, 5e-5, 1e-4, 1e-3, 0.02):
        for rtt_s in (0.0, 1e-4, 0.001, 0.005, 0.05, 1.0):
            sizer = BatchSizer(max_n=100, target_batch_s=0.1)
            for n in settle(sizer, job_s, rtt_s, batches=30):
                assert n <= sizer.max_n or n * job_s <= COVER_MAX_BATCH_S, (job_s, rtt_s, n)
                assert n <= COVER_MAX_N


def test_each_queue_is_sized_from_its_own_jobs() -> None:
    sizers = QueueSizers(["a", "b"], max_n=10, target_batch_s=0.1)
    for _ in range(12):
        sizers["b"].ran(batch_s=sizers["b"].n * 2e-6, jobs=sizers["b"].n, rtt_s=0.001)
    assert sizers["b"].n > 10  # quick jobs over a round trip: grown past max_n
    assert sizers.n(["a"]) == 1  # a's jobs are not measured: one, to start
    assert sizers.n(["a", "b"]) == 1  # one round trip claiming both: the smaller
    assert sizers.n(["b"]) == sizers["b"].n
    sizers.forget(idle_s=1.0)
    assert sizers.n(["b"]) == 1
