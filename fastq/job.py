"""Registered jobs: the function, its retry policy, argument checks, and the options
of an enqueue.

A :class:`JobDef` enqueues through a :class:`Producer` (the App is one), so this
module does not import the App.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import os
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Generic,
    Iterable,
    Optional,
    Protocol,
    Sequence,
    TypeVar,
    Union,
)

import orjson

from fastq._accel import ids
from fastq.retry import Backoff, Exponential, check_age_limit_s, check_retries
from fastq.validate import (
    check_at,
    check_delay_s,
    check_job_id,
    check_priority,
    check_queue_name,
    check_result_ttl_s,
    check_shard_key,
    check_tags,
    check_unique_for_s,
    check_unique_key,
    check_unique_until,
)

if TYPE_CHECKING:
    from fastq.ratelimit import RateKey

R = TypeVar("R")


@dataclass(frozen=True)
class EnqueueOptions:
    """How to enqueue a job, checked when made (before anything reaches Redis).

    ``None`` means the job's own setting (its queue, its priority) or a fresh id.
    Adding an option is adding a field here, with its check in ``__post_init__``,
    and the keyword to the methods that take options.

    ``at`` (an aware datetime or Unix seconds) is kept as Unix seconds. It is read
    on Redis' clock: the job is due once Redis' clock reaches it (see
    :meth:`JobDef.enqueue_at`).

    Raises:
        TypeError, ValueError: an option is of the wrong type or out of range
            (see :mod:`fastq.validate`); ``delay_s`` and ``at`` both given.
    """

    delay_s: float = 0
    at: Union[datetime, float, None] = None
    priority: Optional[int] = None
    job_id: Optional[str] = None
    queue: Optional[str] = None
    retry: Optional[Backoff] = None
    retries: Optional[int] = None
    age_limit_s: Optional[float] = None
    tags: Optional[Sequence[str]] = None
    unique_for_s: Optional[float] = None
    unique_key: Optional[str] = None
    unique_until: Optional[str] = None
    shard_key: Optional[str] = None

    def __post_init__(self) -> None:
        check_delay_s(self.delay_s)
        if self.shard_key is not None:
            check_shard_key(self.shard_key)
        if self.tags is not None:
            object.__setattr__(self, "tags", check_tags(self.tags))
        if self.unique_for_s is not None:
            check_unique_for_s(self.unique_for_s)
        if self.unique_key is not None:
            check_unique_key(self.unique_key)
        if self.unique_until is not None:
            check_unique_until(self.unique_until)
        if self.at is not None:
            if self.delay_s:
                raise TypeError(
                    f"give delay_s or at, not both (delay_s={self.delay_s!r}, at={self.at!r})"
                )
            object.__setattr__(self, "at", check_at(self.at))
        if self.priority is not None:
            check_priority(self.priority)
        if self.job_id is not None:
            check_job_id(self.job_id)
        if self.queue is not None:
            check_queue_name(self.queue)
        if self.retry is not None and not isinstance(self.retry, Backoff):
            raise TypeError(
                "retry must be a policy such as fastq.Exponential(), fastq.Polynomial(), "
                f"fastq.BoundedDoubling(), fastq.Geometric() or fastq.Delays(), not {self.retry!r}"
            )
        if self.retries is not None:
            check_retries(self.retries)
        if self.age_limit_s is not None:
            check_age_limit_s(self.age_limit_s)

    @property
    def delay_ms(self) -> int:
        return int(self.delay_s * 1000)

    @property
    def due(self) -> Union[int, str]:
        """The ``due`` of an enqueue call: ``delay_ms``, or ``at`` in whole
        milliseconds (rounded up: never due early) as ``@<ms>``."""
        if self.at is None:
            return self.delay_ms
        assert isinstance(self.at, float)  # made so in __post_init__
        return f"@{math.ceil(self.at * 1000)}"


@dataclass(frozen=True)
class UniquePlan:
    """How the jobs of one enqueue are unique: ``until`` (see
    ``limits.UNIQUE_UNTIL``), the window in ms and a fixed key (None: each job's
    :func:`default_unique_key`)."""

    until: str
    window_ms: int
    key: Optional[str]


def unique_plan(options: EnqueueOptions, job: Optional[JobDef[Any]]) -> Optional[UniquePlan]:
    """The uniqueness of an enqueue: its options over the job's own; None: not unique.

    Raises:
        ValueError: ``unique_key`` or ``unique_until`` without a ``unique_for_s``
            (on the enqueue or the job); ``shard_key`` with one (a unique job's
            shard is its unique key's, where its lock lives).
    """
    window_s = options.unique_for_s
    if window_s is None and job is not None:
        window_s = job.unique_for_s
    if window_s is None:
        if options.unique_key is not None or options.unique_until is not None:
            raise ValueError(
                "unique_key and unique_until need unique_for_s (on the enqueue or in "
                "@app.job): how long the lock may last"
            )
        return None
    if options.shard_key is not None:
        raise ValueError(
            "shard_key= cannot apply to a unique job: its shard is its unique key's, so "
            "that its lock is found by every enqueue of the same key"
        )
    until = options.unique_until or (job.unique_until if job is not None else None) or "end"
    return UniquePlan(until, max(1, math.ceil(window_s * 1000)), options.unique_key)


def default_unique_key(name: str, args: Sequence[Any], kwargs: Optional[dict[str, Any]]) -> str:
    """A unique job's default key: the SHA-1 (hex) of the canonical JSON (sorted keys)
    of ``[name, args, kwargs]``; the same call gives the same key on any host."""
    canonical = orjson.dumps([name, list(args), kwargs or {}], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha1(canonical).hexdigest()


class Producer(Protocol):
    """What a :class:`JobDef` enqueues through (:class:`fastq.App` is one)."""

    def submit(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]],
        options: EnqueueOptions,
    ) -> str: ...

    def submit_many(
        self,
        name: str,
        calls: Iterable[Any],
        options: EnqueueOptions,
        job_ids: Optional[Sequence[str]] = None,
    ) -> list[str]: ...


def check_runnable(fn: object, name: str) -> bool:
    """Refuse what a worker cannot run as it stands; say whether it is async.

    A worker calls a job and takes what it returns as done, or awaits it when the
    function is a coroutine function (``async def``, also behind
    ``functools.partial`` or as an object's ``__call__``). A generator function
    would return a generator nobody iterates (an async one, an async generator
    nobody iterates), and the job would count as processed though nothing ran.

    Returns:
        True for a coroutine function: a worker runs it on its event loop.

    Raises:
        TypeError: ``fn`` is not callable, or is a generator function (sync or async).
    """
    if not callable(fn):
        raise TypeError(f"cannot register job {name!r}: {fn!r} is not callable")
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    call = None if inspect.isroutine(target) or inspect.isclass(target) else type(target).__call__
    is_async = False
    for candidate in (target, call):
        if candidate is None:
            continue
        if inspect.isasyncgenfunction(candidate):
            kind = "an async generator function"
        elif inspect.isgeneratorfunction(candidate):
            kind = "a generator function"
        else:
            is_async = is_async or inspect.iscoroutinefunction(candidate)
            continue
        raise TypeError(
            f"cannot register job {name!r}: {fn!r} is {kind}, and a worker calls a job "
            "and takes its return as done, so nothing would run; register a plain "
            "function or an async def"
        )
    return is_async


class Delivery(str, Enum):
    """How often a job may run: at least once (the default: a job whose worker dies
    runs again) or at most once (it is taken out of the queue before it runs and
    never runs again: a worker's death loses it)."""

    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


def check_delivery(delivery: object) -> Delivery:
    """``delivery`` as a :class:`Delivery`.

    Raises:
        TypeError: it is not a string.
        ValueError: it is not ``"at_least_once"`` or ``"at_most_once"``.
    """
    if not isinstance(delivery, str):
        raise TypeError(f"delivery must be 'at_least_once' or 'at_most_once', not {delivery!r}")
    try:
        return Delivery(delivery)
    except ValueError:
        raise ValueError(
            f"delivery must be 'at_least_once' or 'at_most_once', not {delivery!r}"
        ) from None


@dataclass(frozen=True)
class JobPolicy:
    """What happens when a job raises.

    ``retries`` further attempts after the first, spaced by ``backoff`` (a
    :class:`fastq.retry.Backoff`: exponential with jitter unless told otherwise).
    Exceptions in ``fail_on`` fail the job at once; then those outside
    ``retry_on`` too. With ``age_limit_s``, a retry is scheduled only if it would
    start within that many seconds of the job's first enqueue, whatever its
    attempts; else the job goes dead saying so.

    Raises:
        TypeError, ValueError: a setting of the wrong type or out of range.
    """

    retries: int = 5
    backoff: Backoff = Exponential()
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout_s: Optional[float] = None
    fail_on: tuple[type[BaseException], ...] = ()
    age_limit_s: Optional[float] = None

    def __post_init__(self) -> None:
        check_retries(self.retries)
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"backoff must be a fastq retry policy, not {self.backoff!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {self.timeout_s!r}")
        for what in ("retry_on", "fail_on"):
            types = getattr(self, what)
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                raise TypeError(f"{what} must be a tuple of exception classes, not {types!r}")
        if self.age_limit_s is not None:
            check_age_limit_s(self.age_limit_s)


class ArgChecker:
    """Checks that arguments bind to a function's signature, fast for the common case.

    A blast calls this per job, so plain positional functions are checked by
    counting; anything else goes through ``inspect.Signature.bind``.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._name = getattr(fn, "__name__", repr(fn))
        try:
            self._signature: Optional[inspect.Signature] = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins without a signature: accept anything
            self._signature = None
            self._counts: Optional[tuple[int, int]] = None
            return
        params = list(self._signature.parameters.values())
        simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        required = sum(1 for p in params if p.default is p.empty)
        self._counts = (required, len(params)) if simple else None

    @property
    def counts(self) -> Optional[tuple[int, int]]:
        """``(required, all)`` positional parameters when a call binds by its count of
        positional arguments alone (no ``*args``, keyword-only or ``**kwargs``)."""
        return self._counts

    def check(self, args: Sequence[Any], kwargs: Optional[dict[str, Any]]) -> None:
        """Raise TypeError naming the function when the arguments do not bind."""
        if self._signature is None:
            return
        if not kwargs and self._counts is not None:
            low, high = self._counts
            if low <= len(args) <= high:
                return
        try:
            self._signature.bind(*args, **(kwargs or {}))
        except TypeError as exc:
            raise TypeError(f"arguments do not fit {self._name}{self._signature}: {exc}") from None

    def binds(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        try:
            self.check(args, kwargs)
        except TypeError:
            return False
        return True


class JobDef(Generic[R]):
    """A function registered with ``@app.job``.

    Calling it runs the function here and now; ``enqueue`` sends it to a worker.
    """

    def __init__(
        self,
        producer: Producer,
        fn: Callable[..., R],
        name: str,
        queue: str,
        priority: int,
        policy: JobPolicy,
        result_ttl_s: Optional[float] = None,
        delivery: Union[Delivery, str] = Delivery.AT_LEAST_ONCE,
        rate_key: Optional[RateKey] = None,
        unique_for_s: Optional[float] = None,
        unique_until: str = "end",
    ) -> None:
        self.producer = producer
        self.fn = fn
        self.name = name
        self.queue = queue
        self.priority = priority
        self.policy = policy
        # the return value is kept this long (ms); None: it is dropped, at no cost
        self.result_ttl_ms: Optional[int] = (
            None if result_ttl_s is None else max(1, int(check_result_ttl_s(result_ttl_s) * 1000))
        )
        self.delivery = check_delivery(delivery)
        # read per job by a worker whose app has at-most-once jobs: a plain attribute
        self.at_most_once = self.delivery is Delivery.AT_MOST_ONCE
        # a unique job: an enqueue while the lock of the same key is held adds nothing
        self.unique_for_s = None if unique_for_s is None else check_unique_for_s(unique_for_s)
        self.unique_until = check_unique_until(unique_until)
        self.arg_checker = ArgChecker(fn)
        # a per-key rate limit (fastq.ratelimit); None: none, at no cost
        self.rate_key = rate_key
        # an async def: a worker awaits it on its event loop (fastq.runners.aio)
        self.is_async = check_runnable(fn, name)
        if self.is_async and self.at_most_once:
            raise TypeError(
                f"cannot register job {name!r}: at-most-once delivery is not supported "
                "for async def jobs yet"
            )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<fastq job {self.name!r} queue={self.queue!r}>"

    def enqueue(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue one call of this job; returns its id. For options (a delay, a
        priority, an id, a queue) use :meth:`enqueue_with`.

        Raises:
            TypeError: the arguments do not fit the function, or are not
                JSON-serializable (NaN and infinities included); nothing is sent.
            fastq.RedisUnavailable: Redis could not be reached.
            fastq.RedisRefused: Redis refused the write (out of memory, ACL).
        """
        return self.producer.submit(self.name, args, kwargs, _NO_OPTIONS)

    def enqueue_with(
        self,
        *,
        delay_s: float = 0,
        at: Union[datetime, float, None] = None,
        priority: Optional[int] = None,
        job_id: Optional[str] = None,
        queue: Optional[str] = None,
        retry: Optional[Backoff] = None,
        retries: Optional[int] = None,
        age_limit_s: Optional[float] = None,
        tags: Optional[Sequence[str]] = None,
        unique_for_s: Optional[float] = None,
        unique_key: Optional[str] = None,
        unique_until: Optional[str] = None,
        shard_key: Optional[str] = None,
    ) -> EnqueueCall:
        """This job with enqueue options; call the result with the job's arguments.

        ``send_email.enqueue_with(delay_s=30, job_id="welcome-42")("a@example.com", "hi")``

        The options are checked here, at once; the call then enqueues like
        :meth:`enqueue` and returns the job id. (Dramatiq's ``send_with_options``
        and Celery's ``apply_async``, made a partial so that the job's own
        arguments stay positional and never clash with an option's name.)

        Args:
            delay_s: run no sooner than this many seconds from now (at most ten years).
            at: run no sooner than this instant: an aware ``datetime`` or Unix
                seconds (a naive datetime is refused); in the past: now. Not with
                ``delay_s``. See :meth:`enqueue_at`.
            priority: overrides the job's priority (an int within ±2**20).
            job_id: the id, instead of a fresh one; enqueueing an id that exists
                does nothing (so calling the result twice enqueues once).
            queue: overrides the job's queue.
            retry: overrides the job's retry policy (a :class:`fastq.retry.Backoff`)
                for this job, on whichever worker runs it.
            retries: overrides the job's attempt limit (further attempts after the
                first).
            age_limit_s: overrides the job's age limit: no retry starts later than
                this many seconds after this enqueue.
            tags: labels (1 to 20 printable strs of at most 100 characters) to
                find or cancel the job by: ``app.jobs_by_tag``, ``app.cancel_by_tag``.
            unique_for_s: make this job unique for that many seconds (overrides the
                job's own): while the lock of its key is held, an enqueue of the
                same key adds nothing and returns the holder's id.
            unique_key: the lock's key (a printable str of at most 200
                characters), instead of a hash of the name and arguments.
            unique_until: when the lock ends before its window: ``"end"`` (the
                job ends), ``"start"`` (it starts) or ``"window"`` (never early).
            shard_key: on a sharded queue, the shard is this key's (a printable
                str of at most 200 characters): jobs of one key keep their order
                (FIFO holds within a shard). Not with a unique job, whose shard is
                its unique key's.

        Raises:
            TypeError, ValueError: an option is of the wrong type or out of range,
                or ``delay_s`` and ``at`` are both given.
        """
        options = EnqueueOptions(
            delay_s=delay_s, at=at, priority=priority, job_id=job_id, queue=queue,
            retry=retry, retries=retries, age_limit_s=age_limit_s, tags=tags,
            unique_for_s=unique_for_s, unique_key=unique_key, unique_until=unique_until,
            shard_key=shard_key,
        )  # fmt: skip
        return EnqueueCall(self, options)

    def enqueue_in(self, delay_s: float, *args: Any, **kwargs: Any) -> str:
        """Enqueue one call of this job to run no sooner than ``delay_s`` seconds
        from now (Redis' clock); returns its id. ``send_email.enqueue_in(30, to)``.

        Raises:
            TypeError: ``delay_s`` is not a number; the arguments do not fit.
            ValueError: ``delay_s`` is NaN, infinite, negative or beyond ten years.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        options = EnqueueOptions(delay_s=delay_s)
        return self.producer.submit(self.name, args, kwargs, options)

    def enqueue_at(self, when: Union[datetime, float], *args: Any, **kwargs: Any) -> str:
        """Enqueue one call of this job to run no sooner than ``when``; returns its id.

        ``send_email.enqueue_at(datetime(2026, 12, 1, 9, tzinfo=timezone.utc), to)``

        ``when`` is read on Redis' clock, the one every worker and reaper judges due
        times by, so jobs given the same ``when`` by any producer are due in the
        same millisecond and start in the order they were enqueued. A ``when`` in
        the past runs now (queued like :meth:`enqueue`).

        Args:
            when: an aware ``datetime`` or Unix seconds (int or float). A naive
                ``datetime`` is refused rather than guessed at.

        Raises:
            TypeError: ``when`` is neither; the arguments do not fit.
            ValueError: a naive datetime; NaN, infinite or negative seconds; more
                than ten years ahead.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        options = EnqueueOptions(at=when)
        return self.producer.submit(self.name, args, kwargs, options)

    def enqueue_many(
        self,
        calls: Iterable[Any],
        *,
        job_ids: Optional[Sequence[str]] = None,
        priority: Optional[int] = None,
        delay_s: float = 0,
        at: Union[datetime, float, None] = None,
        queue: Optional[str] = None,
        retry: Optional[Backoff] = None,
        retries: Optional[int] = None,
        age_limit_s: Optional[float] = None,
        tags: Optional[Sequence[str]] = None,
        unique_for_s: Optional[float] = None,
        unique_key: Optional[str] = None,
        unique_until: Optional[str] = None,
        shard_key: Optional[str] = None,
    ) -> list[str]:
        """Enqueue many calls in pipelined batches (for blasts); returns their ids.
        (A unique job refused by a held lock gives the holder's id in its place.)

        Each call is a tuple of positional arguments or a dict of keyword
        arguments. Every call is checked and encoded before anything is sent, so
        a bad one raises and nothing is enqueued. Options as in
        :meth:`enqueue_with`, with ``job_ids`` (one per call) for ``job_id``.

        Raises:
            TypeError, ValueError: a call or an option is refused; nothing is sent.
            fastq.EnqueueError: Redis took only some of the jobs (``written``) or
                none; retry with ``job_ids=exc.ids``, which is idempotent.
        """
        options = EnqueueOptions(
            delay_s=delay_s, at=at, priority=priority, queue=queue,
            retry=retry, retries=retries, age_limit_s=age_limit_s, tags=tags,
            unique_for_s=unique_for_s, unique_key=unique_key, unique_until=unique_until,
            shard_key=shard_key,
        )  # fmt: skip
        return self.producer.submit_many(self.name, calls, options, job_ids)


_NO_OPTIONS = EnqueueOptions()


class EnqueueCall:
    """A job bound to enqueue options (see :meth:`JobDef.enqueue_with`); calling it
    enqueues one call of the job and returns the job id."""

    __slots__ = ("job", "options")

    def __init__(self, job: JobDef[Any], options: EnqueueOptions) -> None:
        self.job = job
        self.options = options

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        return self.job.producer.submit(self.job.name, args, kwargs, self.options)

    def __repr__(self) -> str:
        return f"<fastq enqueue {self.job.name!r} with {self.options}>"


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
    """

    def __init__(self) -> None:
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


# (id, job, args, kwargs, attempt, envelope): a claimed job as the codec decodes it
Runnable = tuple[bytes, JobDef[Any], list[Any], dict[str, Any], int, dict[str, Any]]
