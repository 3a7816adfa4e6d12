"""Fresh job ids for a producer."""

from __future__ import annotations

import os
import threading

from fastq._accel import ids

# Generated job ids: 14 characters of [0-9A-Za-z]. Redis stores a string of up to
# 14 bytes as a hash field in a 16-byte allocation (1-byte header, NUL), and each id
# is held twice per queued job (the jobs hash's field, the ready list's element).
ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_PREFIX_CHARS = 10  # 62**10, about 2**59.5, random per process
ID_COUNTER_SPAN = len(ID_ALPHABET) ** 4  # ids per prefix (4 counter digits): 14,776,336


class IdGenerator:
    """Job ids: a random per-process prefix and a fixed-width counter.

    Unique across processes and hosts without coordination: the prefix is 10
    characters drawn from ``os.urandom`` (59.5 bits), drawn again after a fork and
    whenever the 4-character counter has used its 14,776,336 values; two prefixes
    meet with probability about n**2 / 2**60.5 over n prefixes ever drawn.

    Thread-safe: the threads of a process (a web server's, ``fastq serve``'s) share
    its producer, and two that read the counter at once would get the same ids,
    the second job then taken for a duplicate and dropped.
    """

    def __init__(self) -> None:
        # one lock per process: a lock another thread held at a fork stays held in
        # the child; setdefault gives every thread of a process the same one
        self._locks: dict[int, threading.Lock] = {}
        self._pid = -1
        self._prefix = ""
        self._next = ID_COUNTER_SPAN  # draws a prefix on first use

    def _reseed(self) -> None:
        self._pid = os.getpid()
        value = int.from_bytes(os.urandom(8), "big")
        digits = []
        for _ in range(ID_PREFIX_CHARS):
            value, digit = divmod(value, len(ID_ALPHABET))
            digits.append(ID_ALPHABET[digit])
        self._prefix = "".join(digits)
        self._next = 0

    def next_ids(self, n: int) -> list[str]:
        pid = os.getpid()
        lock = self._locks.get(pid) or self._locks.setdefault(pid, threading.Lock())
        with lock:
            return self._next_ids(n)

    def _next_ids(self, n: int) -> list[str]:
        if os.getpid() != self._pid:
            self._reseed()
        out: list[str] = []
        while len(out) < n:
            if self._next >= ID_COUNTER_SPAN:
                self._reseed()
            lo = self._next
            hi = min(ID_COUNTER_SPAN, lo + n - len(out))
            self._next = hi
            out.extend(ids.counter_ids(self._prefix, lo, hi, ID_ALPHABET))
        return out
