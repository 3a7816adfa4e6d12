"""Each retry policy against its formula, computed here on its own (exact arithmetic,
or a step-by-step simulation where the policy is defined by steps), for both the
native kernels and the reference; and bad policies refused where they are made,
with nothing written."""

from __future__ import annotations

import math
from fractions import Fraction
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastq
from fastq import retry
from fastq._pyimpl import backoff as ref_backoff
from fastq_ext import backoff as native_backoff
from tests.support.examples import examples

KERNELS = pytest.mark.parametrize("kernels", [ref_backoff, native_backoff], ids=["ref", "native"])
SETTINGS = settings(max_examples=examples(200), deadline=None, database=None)
SECONDS = st.integers(0, 10**6).map(lambda ms: ms / 1000)  # whole ms, up to ~11 days
RAND = st.floats(0.0, 1.0, exclude_max=True)


def sequence(policy: fastq.Backoff, rand: float, n: int = 30) -> list[int]:
    return [policy.delay_ms(attempt, rand) for attempt in range(1, n + 1)]


@pytest.fixture(autouse=True)
def _both(kernels: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "_kernels", kernels)


@pytest.fixture(params=[ref_backoff, native_backoff], ids=["ref", "native"])
def kernels(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    return module


# --- each policy matches its formula ------------------------------------------------------


@SETTINGS
@given(SECONDS, SECONDS, st.floats(0.0, 1.0), RAND)
def test_exponential_formula(backoff_s: float, max_s: float, jitter: float, rand: float) -> None:
    policy = fastq.Exponential(backoff_s, max_s, jitter)
    for n, got in enumerate(sequence(policy, rand)):
        d = min(int(backoff_s * 1000) * 2**n, int(max_s * 1000))
        want = Fraction(d) * (1 - Fraction(jitter)) + Fraction(d) * Fraction(jitter) * Fraction(
            rand
        )
        assert abs(got - want) <= 1, (n, got, float(want))  # float rounding, then truncation


@SETTINGS
@given(st.none() | SECONDS, RAND)
def test_polynomial_formula(max_s: float | None, rand: float) -> None:
    policy = fastq.Polynomial(max_backoff_s=max_s)
    cap_ms = retry.MAX_DELAY_MS if max_s is None else int(max_s * 1000)
    for n, got in enumerate(sequence(policy, rand, 200)):
        # Sidekiq: retry_count**4 + 15 + rand(10) * (retry_count + 1) seconds
        seconds = n**4 + 15 + Fraction(rand) * 10 * (n + 1)
        want = min(seconds * 1000, cap_ms)
        assert abs(got - want) <= 1, (n, got, float(want))  # float rounding, then truncation


def test_polynomial_first_retries_in_seconds() -> None:
    assert [fastq.Polynomial().delay_ms(a, 0.0) for a in (1, 2, 3, 4)] == [
        15_000,
        16_000,
        31_000,
        96_000,
    ]
    assert fastq.Polynomial().delay_ms(1, 0.9999) == 15_000 + 9_999
    assert fastq.Polynomial().delay_ms(10**9, 0.5) == retry.MAX_DELAY_MS


@SETTINGS
@given(SECONDS, SECONDS, st.integers(0, 62))
def test_bounded_doubling_formula(a_s: float, b_s: float, max_doublings: int) -> None:
    min_s, max_s = min(a_s, b_s), max(a_s, b_s)
    policy = fastq.BoundedDoubling(min_s, max_s, max_doublings)
    min_ms, max_ms = int(min_s * 1000), int(max_s * 1000)
    # step by step: the first retry waits min; each further retry doubles the
    # interval while fewer than max_doublings doublings were made, then adds
    # 2**(max_doublings - 1) * min (whole ms); every delay capped at max
    interval, doublings, want = Fraction(min_ms), 0, []
    for _ in range(80):
        want.append(min(math.floor(interval), max_ms))
        if doublings < max_doublings:
            interval, doublings = interval * 2, doublings + 1
        else:
            interval += math.floor(Fraction(2) ** (max_doublings - 1) * min_ms)
    assert sequence(policy, 0.5, 80) == want


def test_bounded_doubling_app_engine_example() -> None:
    policy = fastq.BoundedDoubling(min_backoff_s=10, max_backoff_s=300, max_doublings=3)
    got = [d // 1000 for d in sequence(policy, 0.5, 12)]
    assert got == [10, 20, 40, 80, 120, 160, 200, 240, 280, 300, 300, 300]


@SETTINGS
@given(
    SECONDS,
    st.floats(1.0, 50.0) | st.sampled_from([1.0, 2.0, 3.0]),
    st.none() | SECONDS,
)
def test_geometric_formula(backoff_s: float, ratio: float, max_s: float | None) -> None:
    policy = fastq.Geometric(backoff_s, ratio, max_s)
    cap_ms = retry.MAX_DELAY_MS if max_s is None else int(max_s * 1000)
    for n, got in enumerate(sequence(policy, 0.5, 60)):
        exact = int(backoff_s * 1000) * Fraction(ratio) ** n
        if exact >= cap_ms * (1 + 1e-12):
            assert got == cap_ms
        else:  # libm's pow is within an ulp or so: allow a relative 1e-12, and the truncation
            assert abs(got - min(exact, cap_ms)) <= 1 + float(exact) * 1e-12, (n, got, float(exact))


@SETTINGS
@given(st.lists(SECONDS, min_size=1, max_size=100))
def test_delays_formula(delays_s: list[float]) -> None:
    policy = fastq.Delays(delays_s)
    want = [int(delays_s[min(n, len(delays_s) - 1)] * 1000) for n in range(150)]
    assert sequence(policy, 0.5, 150) == want


# --- the envelope's form of a policy ------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        fastq.Exponential(0.25, 60, 0.1),
        fastq.Polynomial(3600),
        fastq.BoundedDoubling(0.5, 100, 4),
        fastq.Geometric(2, 1.5, 500),
        fastq.Delays([1, 10, 60, 600]),
    ],
)
def test_wire_round_trip(policy: fastq.Backoff) -> None:
    again = retry.from_wire(policy.to_wire())
    assert again == policy and again.to_wire() == policy.to_wire()


@pytest.mark.parametrize(
    "wire",
    [
        None,
        [],
        "exp",
        ["exp"],
        ["exp", 1000, 2000],
        ["what", 1],
        ["exp", -1, 2000, 0.5],
        ["exp", True, 2000, 0.5],
        ["poly", 1.5],
        ["geo", 1000, 0.5, 2000],
        ["dbl", 1000, 500, 2],
        ["dbl", 100, 500, -1],
        ["list", []],
        ["list", 5],
    ],
)
def test_wire_refuses_what_it_cannot_read(wire: Any) -> None:
    with pytest.raises(ValueError, match="invalid retry policy in the envelope"):
        retry.from_wire(wire)
