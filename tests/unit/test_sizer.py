"""The batch sizer, without Redis."""

from __future__ import annotations

from fastq.sizer import BatchSizer


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
