"""Retry backoff math."""

from __future__ import annotations


def backoff_ms(attempt: int, base_ms: int, max_ms: int, jitter: float, rand: float) -> int:
    """Delay before retry number ``attempt`` (1 = first retry), in ms.

    Exponential: ``base_ms * 2 ** (attempt - 1)``, capped at ``max_ms``; then the
    top ``jitter`` fraction of it is scaled by ``rand`` (a uniform draw in
    [0, 1)), so ``jitter=0.5`` spreads the delay over ``[d/2, d)``.
    """
    if attempt < 1:
        attempt = 1
    if base_ms <= 0:
        return 0
    exponent = attempt - 1
    # 2**62 * base overflows nothing in Python but would in C: cap first
    delay = max_ms if exponent >= 62 or base_ms > (max_ms >> exponent) else base_ms << exponent
    delay = min(delay, max_ms)
    if jitter <= 0.0:
        return delay
    if jitter > 1.0:
        jitter = 1.0
    return int(delay * (1.0 - jitter) + delay * jitter * rand)


# The retry policies below take checked input (``fastq.retry`` checks it): ms as
# ints within ten years, ``attempt`` >= 1 (1 = the run that failed first, so
# ``n = attempt - 1`` retries came before this one), ``rand`` a draw in [0, 1).
# Their native twins in ``fastq_ext.backoff`` must give the same ints.

POLYNOMIAL_MAX_N = 1000  # 1000**4 s is far beyond any cap (ten years)


def polynomial_ms(attempt: int, max_ms: int, rand: float) -> int:
    """Sidekiq's curve: ``n**4 + 15 + rand * 10 * (n + 1)`` seconds, ``n = attempt - 1``
    (Sidekiq's ``retry_count``), capped at ``max_ms``."""
    n = attempt - 1 if attempt > 1 else 0
    if n >= POLYNOMIAL_MAX_N:
        return max_ms
    delay = (n * n * n * n + 15) * 1000 + int(rand * (10_000 * (n + 1)))
    return delay if delay < max_ms else max_ms


def doubling_ms(attempt: int, min_ms: int, max_ms: int, max_doublings: int) -> int:
    """App Engine's bounded doubling: ``min_ms`` doubled for each retry up to
    ``max_doublings`` times, then ``2**(max_doublings - 1) * min_ms`` more per
    retry, capped at ``max_ms``."""
    n = attempt - 1 if attempt > 1 else 0
    if min_ms <= 0:
        return 0
    doublings = n if n < max_doublings else max_doublings
    if doublings >= 62 or min_ms > (max_ms >> doublings):
        return max_ms
    delay = min_ms << doublings
    if n > max_doublings:
        # min_ms << max_doublings <= max_ms here, so neither this nor the sum overflows
        step = (min_ms << max_doublings) >> 1
        extra = n - max_doublings
        if step > 0:
            if extra > (max_ms - delay) // step:
                return max_ms
            delay += extra * step
    return delay if delay < max_ms else max_ms


def geometric_ms(attempt: int, base_ms: int, ratio: float, max_ms: int) -> int:
    """``base_ms * ratio**n``, ``n = attempt - 1``, capped at ``max_ms``."""
    n = attempt - 1 if attempt > 1 else 0
    if base_ms <= 0:
        return 0
    try:
        delay = base_ms * ratio**n
    except OverflowError:  # C's pow() gives inf instead
        return max_ms
    if not delay < max_ms:
        return max_ms
    return int(delay)


def listed_ms(attempt: int, delays_ms: tuple[int, ...]) -> int:
    """``delays_ms[n]``, ``n = attempt - 1``; the last one repeated."""
    n = attempt - 1 if attempt > 1 else 0
    last = len(delays_ms) - 1
    return delays_ms[n if n < last else last]
