"""Retry policies: how long a failed job waits before its next attempt, and when it
stops trying.

A policy is a small frozen object (:class:`Exponential`, :class:`Polynomial`,
:class:`BoundedDoubling`, :class:`Geometric`, :class:`Delays`), checked when made,
so a bad one is refused at ``@app.job`` or at the enqueue call, before anything
reaches Redis. The math runs in the native kernels (``fastq_ext.backoff``, through
:mod:`fastq._accel`); this module only checks, dispatches and carries a policy
in the envelope.

An enqueue may override the job's policy: the override travels in the envelope as
a short JSON list (:meth:`Backoff.to_wire`), so a worker on any host applies it,
and nothing is added when the job's own policy applies. A worker reads it back
with :func:`from_wire` only when a job fails: a successful job pays nothing.

``attempt`` below is the run that just failed (1 = the first run), so
``n = attempt - 1`` retries came before the one being scheduled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from fastq._accel import backoff as _kernels
from fastq.validate import MAX_DELAY_S, check_delay_s, is_finite

__all__ = [
    "Backoff",
    "BoundedDoubling",
    "Delays",
    "Exponential",
    "Geometric",
    "Polynomial",
    "check_age_limit_s",
    "check_retries",
    "from_wire",
]

MAX_DELAY_MS = MAX_DELAY_S * 1000
# Attempts beyond this get the same delay as this one (every curve is at its cap
# long before): keeps the kernels in 64-bit integers whatever an envelope says.
MAX_ATTEMPT = 2**31
MAX_RETRIES = 2**31
# Doubling a ms delay more than 62 times leaves 64-bit integers (and ten years behind).
MAX_DOUBLINGS = 62
# An explicit list travels in the envelope of every job that overrides with it.
MAX_DELAYS = 100


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _clamp(attempt: int) -> int:
    return 1 if attempt < 1 else MAX_ATTEMPT if attempt > MAX_ATTEMPT else attempt


def _real(value: object, what: str) -> float:
    """``value`` as a float if it is an int or float (not a bool) and finite.

    Raises:
        TypeError: not a number.
        ValueError: NaN or infinite.
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not is_finite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    return float(value)


class Backoff(ABC):
    """A retry delay curve. Subclasses are frozen dataclasses, checked when made.

    Raises (when made):
        TypeError: a parameter is not a number (or a bool is given for one).
        ValueError: a parameter is negative, NaN, infinite, beyond ten years, or
            conflicts with another.
    """

    @abstractmethod
    def delay_ms(self, attempt: int, rand: float) -> int:
        """The wait before the retry after run ``attempt`` failed, in ms.

        Args:
            attempt: the run that failed (1 = the first); clamped to 1..2**31.
            rand: a uniform draw in [0, 1), used by curves with jitter.

        Returns:
            Whole milliseconds, within 0 and ten years.
        """

    @abstractmethod
    def to_wire(self) -> list[Any]:
        """The policy as a short JSON list, ``[kind, ...]``, for the envelope."""


@dataclass(frozen=True)
class Exponential(Backoff):
    """``backoff_s * 2**n``, capped at ``max_backoff_s``; the top ``jitter``
    fraction of each delay randomised (``jitter=0.5``: within ``[d/2, d)``).
    fastq's default (Celery's ``retry_backoff``, Dramatiq's backoff)."""

    backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        check_delay_s(self.backoff_s, "backoff_s")
        check_delay_s(self.max_backoff_s, "max_backoff_s")
        jitter = _real(self.jitter, "jitter")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], not {self.jitter!r}")
        object.__setattr__(self, "jitter", jitter)  # the kernel's fast path takes a float

    def delay_ms(self, attempt: int, rand: float) -> int:
        delay: int = _kernels.backoff_ms(
            _clamp(attempt), _ms(self.backoff_s), _ms(self.max_backoff_s), self.jitter, rand
        )
        return delay

    def to_wire(self) -> list[Any]:
        return ["exp", _ms(self.backoff_s), _ms(self.max_backoff_s), self.jitter]


@dataclass(frozen=True)
class Polynomial(Backoff):
    """Sidekiq's curve: ``n**4 + 15 + random(0 .. 10 * (n + 1))`` seconds, ``n``
    being Sidekiq's ``retry_count`` (0 before the first retry): about 15-25 s,
    then 26-36 s, 46-76 s, ... 25 retries span about three weeks. The draw is
    continuous where Sidekiq's ``rand(10)`` is a whole number. Capped at
    ``max_backoff_s`` (ten years when None)."""

    max_backoff_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.max_backoff_s is not None:
            check_delay_s(self.max_backoff_s, "max_backoff_s")

    def delay_ms(self, attempt: int, rand: float) -> int:
        cap = MAX_DELAY_MS if self.max_backoff_s is None else _ms(self.max_backoff_s)
        delay: int = _kernels.polynomial_ms(_clamp(attempt), cap, rand)
        return delay

    def to_wire(self) -> list[Any]:
        return ["poly", MAX_DELAY_MS if self.max_backoff_s is None else _ms(self.max_backoff_s)]


@dataclass(frozen=True)
class BoundedDoubling(Backoff):
    """App Engine task queues' ``min_backoff_seconds``, ``max_backoff_seconds`` and
    ``max_doublings``: the first retry waits ``min_backoff_s``; the interval
    doubles with each retry up to ``max_doublings`` times, then grows by the
    constant ``2**(max_doublings - 1) * min_backoff_s`` per retry, capped at
    ``max_backoff_s``. ``(10, 300, 3)``: 10, 20, 40, 80, 120, 160, ... 280, 300, 300.
    Defaults as App Engine's: 0.1 s, 3600 s, 16."""

    min_backoff_s: float = 0.1
    max_backoff_s: float = 3600.0
    max_doublings: int = 16

    def __post_init__(self) -> None:
        check_delay_s(self.min_backoff_s, "min_backoff_s")
        check_delay_s(self.max_backoff_s, "max_backoff_s")
        if self.min_backoff_s > self.max_backoff_s:
            raise ValueError(
                f"min_backoff_s ({self.min_backoff_s!r}) must not exceed "
                f"max_backoff_s ({self.max_backoff_s!r})"
            )
        doublings = self.max_doublings
        if not isinstance(doublings, int) or isinstance(doublings, bool):
            raise TypeError(f"max_doublings must be an int, not {type(doublings).__name__}")
        if not 0 <= doublings <= MAX_DOUBLINGS:
            raise ValueError(f"max_doublings must be within 0..{MAX_DOUBLINGS}, not {doublings}")

    def delay_ms(self, attempt: int, rand: float) -> int:
        delay: int = _kernels.doubling_ms(
            _clamp(attempt), _ms(self.min_backoff_s), _ms(self.max_backoff_s), self.max_doublings
        )
        return delay

    def to_wire(self) -> list[Any]:
        return ["dbl", _ms(self.min_backoff_s), _ms(self.max_backoff_s), self.max_doublings]


@dataclass(frozen=True)
class Geometric(Backoff):
    """``backoff_s * ratio**n``, capped at ``max_backoff_s`` (ten years when
    None): ``Geometric(1, 3)`` waits 1, 3, 9, 27 s. ``ratio`` is at least 1
    (a shrinking delay is no backoff); 1 is a constant delay."""

    backoff_s: float = 1.0
    ratio: float = 2.0
    max_backoff_s: Optional[float] = None

    def __post_init__(self) -> None:
        check_delay_s(self.backoff_s, "backoff_s")
        if self.max_backoff_s is not None:
            check_delay_s(self.max_backoff_s, "max_backoff_s")
        ratio = _real(self.ratio, "ratio")
        if ratio < 1.0:
            raise ValueError(f"ratio must be >= 1 (a shrinking delay is no backoff), not {ratio!r}")
        object.__setattr__(self, "ratio", ratio)

    def delay_ms(self, attempt: int, rand: float) -> int:
        cap = MAX_DELAY_MS if self.max_backoff_s is None else _ms(self.max_backoff_s)
        delay: int = _kernels.geometric_ms(_clamp(attempt), _ms(self.backoff_s), self.ratio, cap)
        return delay

    def to_wire(self) -> list[Any]:
        cap = MAX_DELAY_MS if self.max_backoff_s is None else _ms(self.max_backoff_s)
        return ["geo", _ms(self.backoff_s), self.ratio, cap]


@dataclass(frozen=True)
class Delays(Backoff):
    """An explicit list of delays in seconds, the last one repeated:
    ``Delays([1, 10, 60, 600])`` (``retry_delays_s=`` on ``@app.job``; RQ's
    ``Retry(interval=[...])``, BullMQ's custom backoff). At most 100 delays."""

    delays_s: tuple[float, ...]
    _delays_ms: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        delays = self.delays_s
        if isinstance(delays, (str, bytes)) or not isinstance(delays, (list, tuple)):
            raise TypeError(
                f"retry_delays_s must be a list of seconds, not {type(delays).__name__}"
            )
        if not delays:
            raise ValueError("retry_delays_s must hold at least one delay, not none")
        if len(delays) > MAX_DELAYS:
            raise ValueError(f"retry_delays_s holds {len(delays)} delays, more than {MAX_DELAYS}")
        for i, delay in enumerate(delays):
            check_delay_s(delay, f"retry_delays_s[{i}]")
        object.__setattr__(self, "delays_s", tuple(delays))
        object.__setattr__(self, "_delays_ms", tuple(_ms(d) for d in delays))

    def delay_ms(self, attempt: int, rand: float) -> int:
        delay: int = _kernels.listed_ms(_clamp(attempt), self._delays_ms)
        return delay

    def to_wire(self) -> list[Any]:
        return ["list", list(self._delays_ms)]


def _wire_s(ms: object) -> float:
    """A ms field of a policy on the wire, in seconds (checked again by the policy)."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        raise TypeError(f"a delay in ms must be an int, not {ms!r}")
    return ms / 1000


def from_wire(value: object) -> Backoff:
    """The policy an envelope carries (see :meth:`Backoff.to_wire`), checked as if
    made here: a producer in another language may have written it.

    Raises:
        ValueError: ``value`` is not a policy this version knows, or is out of range.
    """
    try:
        if not isinstance(value, list) or not value:
            raise ValueError("not a non-empty list")
        kind, params = value[0], value[1:]
        if kind == "exp" and len(params) == 3:
            return Exponential(_wire_s(params[0]), _wire_s(params[1]), params[2])
        if kind == "poly" and len(params) == 1:
            return Polynomial(_wire_s(params[0]))
        if kind == "dbl" and len(params) == 3:
            return BoundedDoubling(_wire_s(params[0]), _wire_s(params[1]), params[2])
        if kind == "geo" and len(params) == 3:
            return Geometric(_wire_s(params[0]), params[1], _wire_s(params[2]))
        if kind == "list" and len(params) == 1 and isinstance(params[0], list):
            return Delays(tuple(_wire_s(d) for d in params[0]))
        raise ValueError("unknown kind or wrong number of parameters")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid retry policy in the envelope: {value!r} ({exc})") from None


def check_retries(retries: object) -> int:
    """Return ``retries`` (further attempts after the first) if it is an int
    within ``0..2**31``.

    Raises:
        TypeError: not an int (a bool is refused too).
        ValueError: negative or too large.
    """
    if not isinstance(retries, int) or isinstance(retries, bool):
        raise TypeError(f"retries must be an int, not {type(retries).__name__}")
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries must be within 0..{MAX_RETRIES}, not {retries}")
    return retries


def check_age_limit_s(age_limit_s: object) -> float:
    """Return ``age_limit_s`` if it is a finite number of seconds within
    ``(0, ten years]``.

    Raises:
        TypeError: not an int or float (a bool is refused too).
        ValueError: zero, negative, NaN, infinite or beyond ten years.
    """
    limit = _real(age_limit_s, "age_limit_s")
    if not 0 < limit <= MAX_DELAY_S:
        raise ValueError(
            f"age_limit_s must be within (0, {MAX_DELAY_S}] seconds (ten years), "
            f"not {age_limit_s!r}"
        )
    return limit


def age_limit_error(
    env: dict[str, Any], age_limit_ms: int, now_ms: int, delay_ms: int
) -> Optional[str]:
    """Why a job may not be retried because of its age limit, or None if it may.

    A retry is scheduled only if it would start within ``age_limit_ms`` of the
    job's first enqueue (the decoded envelope's ``t``, its third item, or
    ``enqueued_at`` in the format before); a job without one has no age.
    """
    enqueued_at = env["t"] if "t" in env else env.get("enqueued_at")
    if not isinstance(enqueued_at, (int, float)) or isinstance(enqueued_at, bool):
        return None
    start_age_ms = now_ms + delay_ms - enqueued_at
    if start_age_ms <= age_limit_ms:
        return None
    return (
        f"age limit: first enqueued {(now_ms - enqueued_at) / 1000:.1f} s ago, its next "
        f"attempt would start {start_age_ms / 1000:.1f} s after, beyond its age_limit_s "
        f"of {age_limit_ms / 1000:g} s: not retried"
    )


def envelope_overrides(
    own: Optional[tuple[Backoff, int, Optional[float]]],
    backoff: Optional[Backoff],
    retries: Optional[int],
    age_limit_s: Optional[float],
) -> dict[str, Any]:
    """The envelope fields of an enqueue's overrides: only those that differ from
    the job's own (``own``: its backoff, retries and age limit; None for a job
    this app does not know), so the common enqueue adds nothing."""
    fields: dict[str, Any] = {}
    own_backoff, own_retries, own_age = own if own is not None else (None, None, None)
    if backoff is not None and backoff != own_backoff:
        fields["backoff"] = backoff.to_wire()
    if retries is not None and retries != own_retries:
        fields["retries"] = retries
    if age_limit_s is not None and age_limit_s != own_age:
        fields["age_limit_ms"] = max(1, _ms(age_limit_s))  # the script takes 1 ms at least
    return fields


def resolve(
    env: dict[str, Any], backoff: Backoff, age_limit_s: Optional[float]
) -> tuple[Backoff, Optional[int], Optional[str]]:
    """The backoff and age limit (ms) that apply to a failed job: the envelope's
    overrides, else the job's own. Returns a warning too when an override is
    unreadable (the job's own applies then: a bad field never loses a job)."""
    warning = None
    wire = env.get("backoff")
    if wire is not None:
        try:
            backoff = from_wire(wire)
        except ValueError as exc:
            warning = str(exc)
    limit_ms = None if age_limit_s is None else _ms(age_limit_s)
    override = env.get("age_limit_ms")
    if isinstance(override, float) and override.is_integer():
        override = int(override)  # 60000.0 from a producer of another language
    if override is not None:
        if isinstance(override, int) and not isinstance(override, bool) and override > 0:
            limit_ms = override
        else:
            warning = f"invalid age_limit_ms in the envelope: {override!r}"
    return backoff, limit_ms, warning


def policy_from_keywords(
    retry: Optional[Backoff],
    backoff_s: Optional[float],
    max_backoff_s: Optional[float],
    jitter: Optional[float],
    retry_delays_s: Optional[Sequence[float]],
) -> Backoff:
    """The policy ``@app.job`` keywords describe: ``retry=`` a policy, or
    ``retry_delays_s=`` a list, or the exponential keywords (the default).

    Raises:
        TypeError: ``retry`` is not a policy, or a keyword has the wrong type.
        ValueError: keywords of two policies given together, or one out of range.
    """
    exponential = {
        name: value
        for name, value in (
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
            ("jitter", jitter),
        )
        if value is not None
    }
    if retry is not None:
        if not isinstance(retry, Backoff):
            raise TypeError(
                "retry must be a policy such as fastq.Exponential(), fastq.Polynomial(), "
                f"fastq.BoundedDoubling(), fastq.Geometric() or fastq.Delays(), not {retry!r}"
            )
        clash = [*exponential, *(["retry_delays_s"] if retry_delays_s is not None else [])]
        if clash:
            raise ValueError(
                f"retry= gives the whole policy: {', '.join(clash)} cannot go with it "
                "(put them in the policy, e.g. fastq.Exponential(backoff_s=...))"
            )
        return retry
    if retry_delays_s is not None:
        if exponential:
            raise ValueError(
                f"retry_delays_s lists every delay: {', '.join(exponential)} cannot go with it"
            )
        return Delays(retry_delays_s)  # type: ignore[arg-type]
    return Exponential(**exponential)
