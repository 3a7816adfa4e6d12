"""Periodic jobs: their schedules and the next-fire math. Pure: no Redis here.

A schedule is a sequence of *slots*, instants in Unix milliseconds. Every reaper
computes the same slots, so that a slot can be fired once across all of them (the
compare-and-set lives in ``lua/fire.lua``, the firing in :mod:`fastq.reaper.firer`):

- ``every_s``: the multiples of ``every_s`` since the Unix epoch, so that all hosts
  agree without talking (``every_s=3600`` fires on the hour, UTC).
- ``cron``: the times a standard 5-field cron expression matches in ``tz`` (UTC by
  default), computed by `cronsim <https://pypi.org/project/cronsim/>`_, the library
  Healthchecks uses to check cron jobs: it matches Debian's cron, DST included. A
  job at a specific time that falls in the hour skipped by a spring-forward runs
  right after the change (``30 2 * * *`` in Europe/Berlin runs at 03:00 CEST that
  day); in the hour repeated by a fall-back it runs once, at the first occurrence;
  jobs of finer granularity (``*/15 * * * *``, ``0 * * * *``) follow the clock
  (none in the skipped hour, and the repeated hour's slots both run, being
  distinct instants).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Iterator, Optional, Sequence, Union

from fastq.validate import check_job_id, is_finite

# every_s bounds: sub-second schedules would keep every reaper busy for nothing
MIN_EVERY_S = 1.0
MAX_EVERY_S = 10 * 365 * 24 * 3600  # ten years, as delays
# The cron macros users bring from crontab(5) and Celery/Sidekiq, as 5 fields.
CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# A reaper back after a long downtime jumps close to now through cronsim's reverse
# iteration (which can be off by a DST shift), then walks forward this far at most.
_CATCH_UP_WALK = timedelta(days=2)

CRON_EXTRA_HINT = "cron schedules need the cronsim package: pip install 'fastq[cron]'"


def _cronsim() -> Any:
    """The cronsim module, or an ImportError naming the extra that brings it."""
    try:
        import cronsim
    except ImportError as exc:
        raise ImportError(CRON_EXTRA_HINT) from exc
    return cronsim


def check_every_s(every_s: object) -> float:
    """Return ``every_s`` if it is a finite number of seconds within [1, ten years].

    Raises:
        TypeError: it is not an int or float (a bool is refused too).
        ValueError: it is NaN, infinite, or out of range (0 and negatives included).
    """
    if not isinstance(every_s, (int, float)) or isinstance(every_s, bool):
        raise TypeError(f"every_s must be a number of seconds, not {type(every_s).__name__}")
    if not (is_finite(every_s) and MIN_EVERY_S <= every_s <= MAX_EVERY_S):
        raise ValueError(
            f"every_s must be a finite number of seconds within [{MIN_EVERY_S:g}, "
            f"{MAX_EVERY_S}] (ten years), not {every_s!r}"
        )
    return float(every_s)


def load_tz(tz: object) -> tzinfo:
    """``tz`` as a tzinfo: an IANA name (``"Europe/Berlin"``), a tzinfo, or None (UTC).

    Raises:
        TypeError: it is neither a str nor a tzinfo.
        ValueError: no time zone has that name (nor can: ``tzdata`` supplies the
            database where the system has none; ``fastq[cron]`` installs it).
    """
    if tz is None:
        return timezone.utc
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a time zone name or a tzinfo, not {type(tz).__name__}")
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {tz!r} ({exc})") from None


def check_cron(expr: object, tz: tzinfo) -> str:
    """Return ``expr`` as the 5 fields cronsim reads, if it is a valid schedule.

    Raises:
        TypeError: it is not a str.
        ValueError: it is not 5 fields (or a ``@daily``-style alias), cronsim
            refuses a field, or it never matches.
        ImportError: cronsim is not installed (``pip install 'fastq[cron]'``).
    """
    if not isinstance(expr, str):
        raise TypeError(f"cron must be a str, not {type(expr).__name__}")
    fields = CRON_ALIASES.get(expr.strip().lower(), expr).split()
    if len(fields) != 5:
        raise ValueError(
            f"invalid cron expression {expr!r}: it must have 5 fields (minute hour "
            f"day-of-month month day-of-week) or be one of {', '.join(CRON_ALIASES)}"
        )
    five = " ".join(fields)
    cronsim = _cronsim()
    try:
        next(cronsim.CronSim(five, datetime.now(tz)))
    except cronsim.CronSimError as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None
    except StopIteration:
        raise ValueError(f"cron expression {expr!r} never matches") from None
    return five


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True)
class Schedule:
    """When a periodic job fires: every ``every_ms``, or at ``cron``'s times in ``tz``.

    Build one with :func:`make_schedule`, which checks its input.
    """

    every_ms: Optional[int] = None
    cron: Optional[str] = None
    tz: tzinfo = timezone.utc

    def next_after_ms(self, t_ms: int) -> int:
        """The first slot strictly after ``t_ms`` (Unix ms)."""
        if self.every_ms is not None:
            return (t_ms // self.every_ms + 1) * self.every_ms
        it = self._forward(t_ms)
        while True:
            # cronsim's Debian-style DST fix-up can answer a slot of the repeated hour
            # that lies before t (it iterates in wall time): walk on past it
            slot = _ms(next(it))
            if slot > t_ms:
                return slot

    def latest_ms(self, start_ms: int, now_ms: int) -> int:
        """The last slot within ``[start_ms, now_ms]``, ``start_ms`` being a slot:
        after missed slots, the one to fire (one run, not one per missed slot)."""
        if self.every_ms is not None:
            return max(start_ms, now_ms // self.every_ms * self.every_ms)
        slot = start_ms
        if now_ms - slot > _CATCH_UP_WALK / timedelta(milliseconds=1):
            # long downtime: start the walk near now rather than slot by slot
            near = self._reverse_ms(now_ms) - _CATCH_UP_WALK // timedelta(milliseconds=1)
            if near > slot:
                candidate = self.next_after_ms(near - 1)
                if candidate <= now_ms:
                    slot = candidate
        while True:
            following = self.next_after_ms(slot)
            if following > now_ms:
                return slot
            slot = following

    def upcoming(self, after_ms: int, n: int) -> list[int]:
        """The next ``n`` slots after ``after_ms``."""
        out: list[int] = []
        t = after_ms
        for _ in range(n):
            t = self.next_after_ms(t)
            out.append(t)
        return out

    def describe(self) -> str:
        if self.every_ms is not None:
            return f"every {self.every_ms / 1000:g}s"
        return f"cron {self.cron!r} {getattr(self.tz, 'key', None) or self.tz}"

    def local(self, t_ms: int) -> datetime:
        """``t_ms`` as an aware datetime in the schedule's zone (UTC for every_s)."""
        return datetime.fromtimestamp(t_ms / 1000, self.tz)

    def _forward(self, t_ms: int) -> Iterator[datetime]:
        it: Iterator[datetime] = _cronsim().CronSim(self.cron, self.local(t_ms))
        return it

    def _reverse_ms(self, t_ms: int) -> int:
        return _ms(next(_cronsim().CronSim(self.cron, self.local(t_ms), reverse=True)))


def make_schedule(
    every_s: Optional[float] = None, cron: Optional[str] = None, tz: Union[str, tzinfo, None] = None
) -> Schedule:
    """A checked :class:`Schedule`: exactly one of ``every_s`` and ``cron``.

    Raises:
        TypeError: an argument is of the wrong type.
        ValueError: both or neither of ``every_s`` and ``cron``; ``every_s`` out of
            [1 s, ten years] or not finite; an invalid cron expression; an unknown
            time zone; ``tz`` given with ``every_s`` (its slots are zone-free).
        ImportError: a cron schedule without cronsim (``pip install 'fastq[cron]'``).
    """
    if (every_s is None) == (cron is None):
        which = "both" if every_s is not None else "neither"
        raise ValueError(
            f"a periodic job takes one of every_s= and cron=, not {which}: "
            "@app.periodic(every_s=300) or @app.periodic(cron='*/5 * * * *')"
        )
    if every_s is not None:
        if tz is not None:
            raise ValueError("tz= applies to cron schedules; every_s slots are Unix-time multiples")
        return Schedule(every_ms=round(check_every_s(every_s) * 1000))
    zone = load_tz(tz)
    return Schedule(cron=check_cron(cron, zone), tz=zone)


@dataclass(frozen=True)
class PeriodicJob:
    """A registered job and when it fires.

    Attributes:
        name: the job's registered name (one schedule per job).
        queue, priority: where its runs go.
        schedule: its slots.
        overlap: False: a slot whose previous run is still queued, scheduled for a
            retry or running is skipped; True: every slot fires.
        args, kwargs: what each run is called with.
    """

    name: str
    queue: str
    priority: int
    schedule: Schedule
    overlap: bool = False
    args: Sequence[Any] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def run_id(self, slot_ms: int) -> str:
        """The id of the run of one slot: ``periodic:<name>:<slot_ms>``, readable in
        ``redis-cli`` (the name as a hash when it is not id-safe)."""
        job_id = f"periodic:{self.name}:{slot_ms}"
        try:
            return check_job_id(job_id)
        except ValueError:
            digest = hashlib.sha1(self.name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            return f"periodic:{digest}:{slot_ms}"
