"""Job ids by the batch: the reference of ``fastq_ext.ids``."""

from __future__ import annotations

_pairs: dict[str, list[str]] = {}  # per alphabet: every two-digit string, in order


def counter_ids(prefix: str, lo: int, hi: int, alphabet: str) -> list[str]:
    """``prefix`` followed by each counter value of ``range(lo, hi)`` written as four
    digits of ``alphabet`` (most significant first).

    Raises:
        ValueError: the prefix or alphabet is not ASCII, or a value needs more than
            four digits.
    """
    base = len(alphabet)
    if base < 2 or not alphabet.isascii() or not prefix.isascii():
        raise ValueError("counter_ids takes an ASCII prefix and alphabet")
    if lo < 0 or hi > base**4:
        raise ValueError(f"counter values {lo}..{hi} outside 0..{base**4}")
    pairs = _pairs.get(alphabet)
    if pairs is None:
        pairs = _pairs[alphabet] = [a + b for a in alphabet for b in alphabet]
    base2 = base * base
    return [f"{prefix}{pairs[c // base2]}{pairs[c % base2]}" for c in range(lo, hi)]
