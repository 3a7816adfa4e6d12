"""Registered jobs: a :class:`JobDef` is a function registered with ``@app.job``,
which runs here when called and enqueues through a :class:`Producer` (the App is
one, so this module does not import the App)."""

from __future__ import annotations

from datetime import datetime
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

from fastq.options import NO_OPTIONS, EnqueueOptions
from fastq.policy import ArgChecker, Delivery, JobPolicy, check_delivery, check_runnable
from fastq.validate import check_result_ttl_s, check_unique_for_s, check_unique_until

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fastq.circuit import CircuitKey
    from fastq.keytemplate import KeyTemplate
    from fastq.options import EnqueueKeywords, EnqueueManyKeywords
    from fastq.ratelimit import RateKey

R = TypeVar("R")


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
        group: Optional[KeyTemplate] = None,
        circuit: Optional[CircuitKey] = None,
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
        # the group of its jobs, formatted from their arguments at enqueue; None: none
        self.group = group
        # a circuit breaker (fastq.circuit); None: none, at no cost
        self.circuit = circuit
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
            TypeError: the arguments do not fit the function,, or hold what
                JSON cannot carry as it is (a datetime, a UUID, a Decimal, a set, NaN:
                see docs/enqueueing.md; the message says where); nothing is sent.
            fastq.RedisUnavailable: Redis could not be reached.
            fastq.RedisRefused: Redis refused the write (out of memory, ACL).
        """
        return self.producer.submit(self.name, args, kwargs, NO_OPTIONS)

    def step(self, *args: Any, **kwargs: Any) -> Step:
        """A call of this job as a link of a chain (``app.chain(a.step(1), b.step())``):
        checked against the function when the chain is made (a link given the
        previous link's return value takes it as its first argument). Options of
        its own (a queue, a priority, retries) with :meth:`Step.options`."""
        return Step(self, args, kwargs, NO_OPTIONS, None)

    def enqueue_with(self, **options: Unpack[EnqueueKeywords]) -> EnqueueCall:
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
        return EnqueueCall(self, EnqueueOptions.of(options, "enqueue_with"))

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
        **options: Unpack[EnqueueManyKeywords],
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
        made = EnqueueOptions.of(options, "enqueue_many")
        return self.producer.submit_many(self.name, calls, made, job_ids)


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


# the enqueue options a link of a chain may have: the others (an id, a delay, tags,
# a unique lock, a shard key) are the chain's to decide
STEP_OPTIONS = ("queue", "priority", "retry", "retries", "age_limit_s")


class Step:
    """A call of a job as a link of a chain (see :meth:`JobDef.step`)."""

    __slots__ = ("args", "enqueue_options", "job", "kwargs", "pass_result")

    def __init__(
        self,
        job: JobDef[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        options: EnqueueOptions,
        pass_result: Optional[bool],
    ) -> None:
        self.job = job
        self.args = tuple(args)
        self.kwargs = kwargs
        self.enqueue_options = options
        # None: as the chain says (``app.chain(..., pass_results=...)``)
        self.pass_result = pass_result

    def options(self, *, pass_result: Optional[bool] = None, **options: Any) -> Step:
        """This step with enqueue options (``queue``, ``priority``, ``retry``,
        ``retries``, ``age_limit_s``), and ``pass_result``: whether it takes the
        previous link's return value as its first argument (None: as the chain
        says).

        Raises:
            TypeError, ValueError: another option, or a bad value (checked here).
        """
        other = sorted(set(options) - set(STEP_OPTIONS))
        if other:
            raise TypeError(
                f"a step takes the options {', '.join(STEP_OPTIONS)}, not {', '.join(other)} "
                "(a chain chooses its links' ids and enqueues each when the one before "
                "it succeeds)"
            )
        made = EnqueueOptions.of(options, "step")
        keep = self.pass_result if pass_result is None else bool(pass_result)
        return Step(self.job, self.args, self.kwargs, made, keep)

    def __repr__(self) -> str:
        return f"<fastq step {self.job.name!r}{self.args!r}>"


# (id, job, args, kwargs, attempt, envelope): a claimed job as the codec decodes it
Runnable = tuple[bytes, JobDef[Any], list[Any], dict[str, Any], int, dict[str, Any]]
