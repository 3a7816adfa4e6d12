"""Exceptions users see, and the two a job raises (or returns) to steer its fate."""

from __future__ import annotations

from typing import Optional


class FastqError(Exception):
    """Base class of fastq's own errors."""


class RedisUnavailable(FastqError, ConnectionError):
    """Redis could not be reached (refused, timed out, connection lost)."""


class RedisRefused(FastqError):
    """Redis answered but refused the call: out of memory (``OOM``), a password or
    ACL that does not allow it (``NOAUTH``, ``WRONGPASS``, ``NOPERM``), or busy.

    Attributes:
        fault: what kind of refusal, e.g. ``"out of memory"`` or ``"access denied"``.
    """

    def __init__(self, fault: str, message: str) -> None:
        super().__init__(message)
        self.fault = fault


class Retry(Exception):
    """Raise or return from a job to run it again later.

    Args:
        delay_s: seconds to wait before the next attempt; ``None`` uses the job's
            backoff policy. The attempt still counts against the job's ``retries``.
    """

    def __init__(self, delay_s: Optional[float] = None) -> None:
        if delay_s is not None and (not isinstance(delay_s, (int, float)) or delay_s < 0):
            raise ValueError(f"Retry delay_s must be a number >= 0, not {delay_s!r}")
        super().__init__(delay_s)
        self.delay_s = delay_s


class Fail(Exception):
    """Raise or return from a job to fail it for good: it goes to the dead set."""

    def __init__(self, reason: str = "failed") -> None:
        super().__init__(reason)
        self.reason = str(reason)


class JobTimeout(BaseException):
    """Raised inside a job that ran past its ``timeout_s``.

    A BaseException, so that a job's own ``except Exception`` cannot swallow it;
    the worker settles it like a failure (retried while attempts remain).
    """
