"""What a producer may send, in one place: the limits and the checks that enforce them.

Everything here runs before anything reaches Redis, so a refused call writes
nothing. ``fastq/protocol/lua/enqueue.lua`` checks the same limits (its constants are
these: ``tests/unit/test_protocol_limits.py``), so that a producer of another language
cannot write what a worker cannot serve; where Lua cannot check as much cheaply (the
Unicode classes of a tag), the script checks less and docs/protocol.md says so.

- **Job ids**: 1 to :data:`MAX_JOB_ID_BYTES` bytes of printable ASCII without
  whitespace, so that any id fits a pool's heartbeat slot (``heartbeat.MAX_ID_BYTES``)
  and reads the same in a log, a shell and ``redis-cli``. Ids starting with
  :data:`RESERVED_PREFIX` are fastq's own (the held sets' sentinel is one).
- **Queue names**: 1 to :data:`MAX_QUEUE_NAME_CHARS` ASCII letters, digits, ``_``,
  ``.`` and ``-``: no ``,`` (``-q a,b`` means two queues), no ``:``/``{``/``}`` (key
  structure and the Cluster hash tag), no ``#`` (fastq's shard names), no
  whitespace, control or zero-width characters (look-alike queues).
- **Namespaces**: the same characters plus ``:``.
- **Shards** (a sharded queue, :mod:`fastq.protocol.shards`): an int of 1 to
  :data:`MAX_SHARDS` shards. ``#`` (:data:`SHARD_SEP`) is never in a user's queue
  name: fastq names a queue's shards ``name#1``, ``name#2`` ....
- **Delays**: a finite real number of seconds, ``0 <= delay_s <= MAX_DELAY_S``.
- **Due times** (``at``): an aware ``datetime`` or Unix seconds (a finite real
  number >= 0), at most :data:`MAX_DELAY_S` ahead of this process' clock; a naive
  ``datetime`` is refused (it names no instant). A time in the past means now.
- **Priorities**: an int within ``±MAX_PRIORITY``.
- **Results** (``result_ttl_s``): a finite number of seconds in (0,
  :data:`MAX_RESULT_TTL_S`]; a kept return value is JSON of at most
  :data:`MAX_RESULT_BYTES`.
- **Progress** (``set_progress``): a finite fraction in [0, 1] and a ``meta`` of at
  most :data:`MAX_PROGRESS_META_BYTES` as JSON.
- **Rate limits**: an int ``rate`` of 1 to :data:`MAX_RATE` jobs per ``per_s``, a
  whole number of milliseconds within [1 ms, 1 day], at most :data:`MAX_RATE` jobs
  per second; ``burst`` an int within 1..``MAX_RATE``.
- **Tags**: a list (or tuple) of 1 to :data:`MAX_TAGS` strs, each 1 to
  :data:`MAX_TAG_CHARS` printable characters (``str.isprintable``: no newline, tab
  or control character; the space is allowed); repeats are dropped.
- **Unique jobs**: ``unique_for_s`` a finite number of seconds in (0,
  :data:`MAX_DELAY_S`]; ``unique_key`` 1 to :data:`MAX_UNIQUE_KEY_CHARS` printable
  characters; ``unique_until`` one of :data:`UNIQUE_UNTIL`.
- **Groups**: 1 to :data:`MAX_GROUP_CHARS` printable characters, as tags.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

MAX_JOB_ID_BYTES = 200
RESERVED_PREFIX = "fastq:"
MAX_QUEUE_NAME_CHARS = 100
# A sharded queue's shards are ``name`` (shard 0), ``name#1``, ...: the separator is
# no character a user's queue name may hold.
SHARD_SEP = "#"
# Shards of one queue at most: a worker serving it peeks at the others after each
# batch (3 plain reads each), so K is what that round trip carries.
MAX_SHARDS = 64
MAX_NAMESPACE_CHARS = 100
MAX_DELAY_S = 10 * 365 * 24 * 3600  # ten years
MAX_PRIORITY = 2**20
MAX_RESULT_TTL_S = 30 * 24 * 3600  # thirty days
MAX_RESULT_BYTES = 512 * 1024  # a result is read whole by app.result()
MAX_PROGRESS_META_BYTES = 4096  # sent every beat while the job runs
MAX_RATE = 1_000_000  # jobs per period, jobs per second and burst, at most
MAX_RATE_PERIOD_MS = 24 * 3600 * 1000  # a day
# The default burst: the jobs of this long at the limit's rate (at least one). It
# absorbs a worker's lateness in claiming a token due (a scheduler tick, a round
# trip), which would otherwise be throughput lost for good.
DEFAULT_BURST_S = 0.05
MAX_TAGS = 20  # per job: each is an entry of the queue's tag index
MAX_TAG_CHARS = 100
# a job's name: in every envelope, record and listing, so bounded and printable
MAX_JOB_NAME_CHARS = 200
MAX_UNIQUE_KEY_CHARS = 200
# A group's name is part of each of its ready jobs' entry in the queue's groups index.
MAX_GROUP_CHARS = 100
# Jobs of one enqueue script call at most (and with tags or unique locks, each then
# costing the script two to four times as much): a call blocks Redis while it runs.
MAX_JOBS_PER_CALL = 1000
MAX_JOBS_PER_CALL_EXTRAS = 250
# An envelope's enqueued_at (Unix ms) within [2000-01-01, Redis' clock + a day]:
# seconds or microseconds sent for milliseconds are refused, not aged 56 years.
MIN_ENQUEUED_AT_MS = 946_684_800_000
MAX_ENQUEUED_AHEAD_MS = 24 * 3600 * 1000
# The fields of an envelope's object a producer may set (docs/protocol.md), and
# those only workers write (a producer's would change how its job is retried).
ENVELOPE_FIELDS = ("k", "p", "retries", "age_limit_ms", "backoff", "g")
# The envelope field of a job whose rate-limit token is reserved (its slot, ms on
# Redis' clock: fastq.ratelimit).
SLOT_FIELD = "rate_slot"
WORKER_FIELDS = ("attempts", "error", "traceback", "failed_at", SLOT_FIELD, "unknown_since")
# The field the enqueue script writes into the envelope of a job in a batch: its
# batch's id (a worker groups its acks by it). No producer sends it.
BATCH_FIELD = "b"
# when a unique job's lock ends: as it ends (done, dead, broken, cancelled), as it
# starts (one copy may wait while one runs), or when its window does
UNIQUE_UNTIL = ("end", "start", "window")

# Printable ASCII without the space: 0x21 ('!') to 0x7e ('~').
_JOB_ID = re.compile(rf"[!-~]{{1,{MAX_JOB_ID_BYTES}}}")
_QUEUE_NAME = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_QUEUE_NAME_CHARS}}}")
_NAMESPACE = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_NAMESPACE_CHARS}}}")


def is_finite(value: float) -> bool:
    """``math.isfinite``, but false for an int too large for a float (which
    ``math.isfinite`` raises ``OverflowError`` for): a 400-digit number is bad input,
    refused by the check that asks, never a crash."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: str, limit: int = 60) -> str:
    """``repr`` of a value for an error message, cut short (an id may be 10,000 chars)."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} chars)"


def check_job_id(job_id: object) -> str:
    """Return ``job_id`` if a worker can serve it.

    Raises:
        TypeError: it is not a str.
        ValueError: it is empty, longer than 200 bytes, holds anything but printable
            ASCII without whitespace, or starts with the reserved ``fastq:``.
    """
    if not isinstance(job_id, str):
        raise TypeError(f"job_id must be a str, not {type(job_id).__name__}")
    if _JOB_ID.fullmatch(job_id) is None:
        raise ValueError(
            f"invalid job_id {_shown(job_id)}: it must be 1 to {MAX_JOB_ID_BYTES} characters "
            "of printable ASCII without whitespace"
        )
    if job_id.startswith(RESERVED_PREFIX):
        raise ValueError(
            f"invalid job_id {_shown(job_id)}: ids starting with "
            f"{RESERVED_PREFIX!r} are reserved for fastq"
        )
    return job_id


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a usable queue name (see the module docstring).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: it is empty, too long, or holds anything but ASCII letters,
            digits, ``_``, ``.`` and ``-``.
    """
    if not isinstance(name, str):
        raise TypeError(f"queue name must be a str, not {type(name).__name__}")
    if _QUEUE_NAME.fullmatch(name) is None:
        if SHARD_SEP in name:
            raise ValueError(
                f"invalid queue name {_shown(name)}: {SHARD_SEP!r} is reserved for the "
                f"shards of a sharded queue (a queue of shards=K is served as a whole "
                "by its own name)"
            )
        raise ValueError(
            f"invalid queue name {_shown(name)}: it must be 1 to {MAX_QUEUE_NAME_CHARS} "
            "ASCII letters, digits, '_', '.' or '-'"
        )
    return name


_SHARD_INDEX = re.compile(r"[1-9][0-9]{0,2}")


def check_physical_queue_name(name: object) -> str:
    """Return ``name`` if it names a queue in Redis: a queue name, or one of
    fastq's shard names ``<queue>#<i>`` (``i`` within 1..MAX_SHARDS-1).

    Raises:
        TypeError, ValueError: as :func:`check_queue_name`, or a bad shard index.
    """
    if isinstance(name, str) and SHARD_SEP in name:
        base, _, index = name.partition(SHARD_SEP)
        check_queue_name(base)
        if _SHARD_INDEX.fullmatch(index) is None or int(index) >= MAX_SHARDS:
            raise ValueError(f"invalid shard name {_shown(name)}")
        return name
    return check_queue_name(name)


def check_shards(shards: object) -> int:
    """Return ``shards`` if it is a usable shard count: an int within 1..MAX_SHARDS.

    Raises:
        TypeError: not an int (a bool is refused too).
        ValueError: out of range.
    """
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError(f"shards must be an int, not {type(shards).__name__}")
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be within 1..{MAX_SHARDS}, not {shards}")
    return shards


def check_shard_key(key: object) -> str:
    """Return ``key`` if it is a usable ``shard_key``: as a ``unique_key``.

    Raises:
        TypeError: not a str.
        ValueError: empty, longer than ``MAX_UNIQUE_KEY_CHARS``, or not printable.
    """
    if not isinstance(key, str):
        raise TypeError(f"shard_key must be a str, not {type(key).__name__}")
    if not 1 <= len(key) <= MAX_UNIQUE_KEY_CHARS or not key.isprintable():
        raise ValueError(
            f"invalid shard_key {_shown(key)}: it must be 1 to {MAX_UNIQUE_KEY_CHARS} "
            "printable characters (no newline, tab or control character)"
        )
    return key


def check_namespace(namespace: object) -> str:
    """Return ``namespace`` if it is a usable key prefix: as a queue name, plus ``:``.

    Raises:
        TypeError: it is not a str.
        ValueError: it is empty, too long, or holds other characters.
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, not {type(namespace).__name__}")
    if _NAMESPACE.fullmatch(namespace) is None:
        raise ValueError(
            f"invalid namespace {_shown(namespace)}: it must be 1 to {MAX_NAMESPACE_CHARS} "
            "ASCII letters, digits, '_', '.', '-' or ':'"
        )
    return namespace


def check_delay_s(delay_s: object, what: str = "delay_s") -> float:
    """Return ``delay_s`` if it is a finite real number of seconds within [0, 10 years].

    Raises:
        TypeError: it is not an int or float (a bool is refused too).
        ValueError: it is NaN, infinite, negative or beyond ten years.
    """
    if not isinstance(delay_s, (int, float)) or isinstance(delay_s, bool):
        raise TypeError(f"{what} must be a number of seconds, not {type(delay_s).__name__}")
    if not (is_finite(delay_s) and 0 <= delay_s <= MAX_DELAY_S):
        raise ValueError(
            f"{what} must be a finite number of seconds within [0, {MAX_DELAY_S}] "
            f"(ten years), not {delay_s!r}"
        )
    return delay_s


def delay_ms(delay_s: object) -> int:
    """``delay_s`` checked (see :func:`check_delay_s`) and in whole milliseconds."""
    return int(check_delay_s(delay_s) * 1000)


def check_at(at: object) -> float:
    """Return ``at`` as Unix seconds if it is a due time a producer may give.

    Args:
        at: an aware ``datetime``, or Unix seconds as an int or float.

    Returns:
        The instant in Unix seconds (a time in the past is kept: it means now).

    Raises:
        TypeError: it is neither a datetime nor a number (a bool is refused too).
        ValueError: a naive datetime (no tzinfo: it names no instant); NaN,
            infinite or negative seconds; or more than ten years ahead of this
            process' clock.
    """
    if isinstance(at, datetime):
        if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
            raise ValueError(
                f"at={at!r} is a naive datetime, which names no instant: give it a "
                "tzinfo, e.g. datetime.now(timezone.utc) + timedelta(minutes=5)"
            )
        seconds = at.timestamp()
    elif isinstance(at, (int, float)) and not isinstance(at, bool):
        seconds = float(at)
        if not (is_finite(seconds) and seconds >= 0):
            raise ValueError(f"at must be finite Unix seconds >= 0, not {at!r}")
    else:
        raise TypeError(f"at must be an aware datetime or Unix seconds, not {type(at).__name__}")
    ahead_s = seconds - time.time()
    if ahead_s > MAX_DELAY_S:
        raise ValueError(
            f"at={at!r} is {ahead_s / (365 * 24 * 3600):.1f} years ahead; "
            f"at most {MAX_DELAY_S} s (ten years) is allowed"
        )
    return seconds


def check_priority(priority: object) -> int:
    """Return ``priority`` if it is an int within ``±MAX_PRIORITY`` (a bool is refused).

    Raises:
        TypeError: it is not an int.
        ValueError: it is out of range.
    """
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be within ±{MAX_PRIORITY}, not {priority}")
    return priority


def check_result_ttl_s(ttl_s: object) -> float:
    """Return ``ttl_s`` if it is a usable ``result_ttl_s``: a finite real number of
    seconds, ``0 < ttl_s <= MAX_RESULT_TTL_S``.

    Raises:
        TypeError: not a real number.
        ValueError: not finite, not above 0, or above the limit.
    """
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)):
        raise TypeError(f"result_ttl_s must be a number of seconds, not {ttl_s!r}")
    if not is_finite(ttl_s) or not 0 < ttl_s <= MAX_RESULT_TTL_S:
        raise ValueError(
            f"result_ttl_s must be a finite number of seconds in (0, {MAX_RESULT_TTL_S}], "
            f"not {ttl_s!r}"
        )
    return float(ttl_s)


@dataclass(frozen=True)
class RateLimit:
    """A queue's rate limit: ``rate`` job starts per ``period_ms``, evenly spaced, and
    up to ``burst`` at once after a quiet spell (so at most ``rate + burst - 1`` in
    any window of one period)."""

    rate: int
    period_ms: int
    burst: int

    def __str__(self) -> str:
        unit = {1000: "s", 60_000: "m", 3_600_000: "h", 86_400_000: "d"}.get(self.period_ms)
        per = unit if unit else f"{self.period_ms}ms"
        return f"{self.rate}/{per} (burst {self.burst})"


def check_rate_limit(rate: object, per_s: object = 1.0, burst: object = None) -> RateLimit:
    """Return the :class:`RateLimit` of ``rate`` jobs per ``per_s`` seconds.

    Args:
        rate: an int within 1..``MAX_RATE``.
        per_s: the period, a whole number of milliseconds within [0.001, 86400] s;
            and ``rate / per_s`` at most ``MAX_RATE`` jobs a second.
        burst: jobs that may start at once after a quiet spell, an int within
            1..``MAX_RATE``; None: the jobs of ``DEFAULT_BURST_S`` at this rate, at
            least 1 (so 5 for 100/s, 1 for 14/s).

    Raises:
        TypeError: a value of the wrong type (a bool is refused too).
        ValueError: zero, negative, non-finite, fractional milliseconds or too large.
    """
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise TypeError(f"rate limit: rate must be an int (jobs per period), not {rate!r}")
    if not 1 <= rate <= MAX_RATE:
        raise ValueError(f"rate limit: rate must be within 1..{MAX_RATE} jobs, not {rate!r}")
    if isinstance(per_s, bool) or not isinstance(per_s, (int, float)):
        raise TypeError(f"rate limit: per_s must be a number of seconds, not {per_s!r}")
    if not (is_finite(per_s) and 0 < per_s <= MAX_RATE_PERIOD_MS / 1000):
        raise ValueError(
            f"rate limit: per_s must be a finite number of seconds in (0, "
            f"{MAX_RATE_PERIOD_MS // 1000}], not {per_s!r}"
        )
    period_ms = round(per_s * 1000)
    if period_ms < 1 or abs(period_ms - per_s * 1000) > 1e-6:
        raise ValueError(f"rate limit: per_s must be whole milliseconds, not {per_s!r}")
    if rate * 1000 > MAX_RATE * period_ms:
        raise ValueError(
            f"rate limit: {rate} jobs per {per_s!r} s is above {MAX_RATE} jobs a second"
        )
    if burst is None:
        burst = min(rate, max(1, math.ceil(rate * DEFAULT_BURST_S * 1000 / period_ms)))
    elif isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"rate limit: burst must be an int (jobs), not {burst!r}")
    elif not 1 <= burst <= MAX_RATE:
        raise ValueError(f"rate limit: burst must be within 1..{MAX_RATE} jobs, not {burst!r}")
    return RateLimit(rate, period_ms, burst)


_RATE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE_TEXT = re.compile(r"([0-9]+)\s*/\s*(s|m|h|d|sec|min|hour|day)")


def parse_rate_limit(text: str, burst: Optional[int] = None) -> RateLimit:
    """``14/s``, ``600/m``, ``1000/h``, ``5000/d``: a checked :class:`RateLimit`.

    Raises:
        ValueError: any other text, or a rate :func:`check_rate_limit` refuses.
    """
    match = _RATE_TEXT.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(
            f"rate limit: {text!r} is not a rate: write JOBS/UNIT, e.g. 14/s, 600/m, "
            "1000/h or 5000/d"
        )
    return check_rate_limit(int(match[1]), _RATE_UNITS[match[2][0]], burst)


def check_tags(tags: object) -> tuple[str, ...]:
    """Return ``tags`` as a tuple without repeats, if they are usable tags.

    Raises:
        TypeError: not a list or tuple (a lone str is refused), or a tag is not a str.
        ValueError: empty, more than ``MAX_TAGS``, or a tag empty, too long or not
            printable.
    """
    if not isinstance(tags, (list, tuple)):
        raise TypeError(f"tags must be a list of str, not {type(tags).__name__}")
    if not 1 <= len(tags) <= MAX_TAGS:
        raise ValueError(f"tags must hold 1 to {MAX_TAGS} tags, not {len(tags)}")
    for i, tag in enumerate(tags):
        check_tag(tag, f"tags[{i}]")
    return tuple(dict.fromkeys(tags))


def check_tag(tag: object, what: str = "tag") -> str:
    """Return ``tag`` if it is a usable tag (see the module docstring).

    Raises:
        TypeError: not a str.
        ValueError: empty, longer than ``MAX_TAG_CHARS``, or not printable.
    """
    if not isinstance(tag, str):
        raise TypeError(f"{what} must be a str, not {type(tag).__name__}")
    if not 1 <= len(tag) <= MAX_TAG_CHARS or not tag.isprintable():
        raise ValueError(
            f"invalid {what} {_shown(tag)}: it must be 1 to {MAX_TAG_CHARS} printable "
            "characters (no newline, tab or control character)"
        )
    return tag


def check_group(group: object, what: str = "group") -> str:
    """Return ``group`` if it is a usable group name (see the module docstring).

    Raises:
        TypeError: not a str.
        ValueError: empty, longer than ``MAX_GROUP_CHARS``, or not printable.
    """
    if not isinstance(group, str):
        raise TypeError(f"{what} must be a str, not {type(group).__name__}")
    if not 1 <= len(group) <= MAX_GROUP_CHARS or not group.isprintable():
        raise ValueError(
            f"invalid {what} {_shown(group)}: it must be 1 to {MAX_GROUP_CHARS} printable "
            "characters (no newline, tab or control character)"
        )
    return group


def check_job_name(name: object) -> str:
    """Return ``name`` if it can name a job: 1 to ``MAX_JOB_NAME_CHARS`` printable
    characters (every path that enqueues or registers a job checks it, and the
    enqueue script refuses a name of more, or with a control character).

    Raises:
        TypeError: not a str.
        ValueError: empty, longer than ``MAX_JOB_NAME_CHARS``, or not printable.
    """
    if not isinstance(name, str):
        raise TypeError(f"job name must be a non-empty str, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_JOB_NAME_CHARS or not name.isprintable():
        raise ValueError(
            f"invalid job name {_shown(name)}: it must be 1 to {MAX_JOB_NAME_CHARS} "
            "printable characters (no newline, tab or control character)"
        )
    return name


def check_unique_key(key: object) -> str:
    """Return ``key`` if it is a usable ``unique_key``.

    Raises:
        TypeError: not a str.
        ValueError: empty, longer than ``MAX_UNIQUE_KEY_CHARS``, or not printable.
    """
    if not isinstance(key, str):
        raise TypeError(f"unique_key must be a str, not {type(key).__name__}")
    if not 1 <= len(key) <= MAX_UNIQUE_KEY_CHARS or not key.isprintable():
        raise ValueError(
            f"invalid unique_key {_shown(key)}: it must be 1 to {MAX_UNIQUE_KEY_CHARS} "
            "printable characters (no newline, tab or control character)"
        )
    return key


def check_unique_for_s(window_s: object) -> float:
    """Return ``window_s`` if it is a usable ``unique_for_s``: a finite number of
    seconds in (0, ``MAX_DELAY_S``].

    Raises:
        TypeError: not an int or float (a bool is refused too).
        ValueError: not finite, not above 0, or above ten years.
    """
    if isinstance(window_s, bool) or not isinstance(window_s, (int, float)):
        raise TypeError(f"unique_for_s must be a number of seconds, not {window_s!r}")
    if not is_finite(window_s) or not 0 < window_s <= MAX_DELAY_S:
        raise ValueError(
            f"unique_for_s must be a finite number of seconds in (0, {MAX_DELAY_S}], "
            f"not {window_s!r}"
        )
    return float(window_s)


def check_unique_until(mode: object) -> str:
    """Return ``mode`` if it is one of ``UNIQUE_UNTIL``.

    Raises:
        TypeError: not a str. ValueError: another str.
    """
    if not isinstance(mode, str):
        raise TypeError(f"unique_until must be a str, not {type(mode).__name__}")
    if mode not in UNIQUE_UNTIL:
        raise ValueError(
            f"unique_until must be one of {', '.join(map(repr, UNIQUE_UNTIL))}, not {mode!r}"
        )
    return mode
