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
