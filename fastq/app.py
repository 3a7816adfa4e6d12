"""The producer API: an App registers jobs and enqueues them."""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from datetime import datetime, tzinfo
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar, Union, overload

import redis
from redis import Redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry as RedisRetry

from fastq import flow, scripts
from fastq._accel import codec
from fastq._version import __version__
from fastq.cancel import cancel_by_tag, cancel_ids
from fastq.contracts import ENQUEUE, enqueue_extras
from fastq.errors import EnqueueError, EnqueueInterrupted, FastqError
from fastq.introspect import (
    JobInfo,
    TaggedJob,
    TagPage,
    get_job,
    job_states,
    queue_stats,
    tagged_ids,
)
from fastq.job import (
    ArgChecker,
    Delivery,
    EnqueueOptions,
    IdGenerator,
    JobDef,
    JobPolicy,
    UniquePlan,
    check_delivery,
    check_runnable,
    default_unique_key,
    unique_plan,
)
from fastq.keys import QueueKeys, validate_queue_name
from fastq.limits import (
    RateLimit,
    check_job_id,
    check_namespace,
    check_priority,
    check_rate_limit,
    check_result_ttl_s,
    check_tag,
    check_unique_for_s,
    check_unique_until,
)
from fastq.periodic import PeriodicJob, make_schedule
from fastq.ratekey import RateKey
from fastq.redis_faults import REDIS_ERRORS, Fault, classify, for_producer
from fastq.results import wait_for_result
from fastq.retry import Backoff, envelope_overrides, policy_from_keywords

try:
    from redis import DriverInfo
except ImportError:  # redis-py before 7: it reads its version once, at import
    _CLIENT_OPTIONS: dict[str, Any] = {}
else:
    # The library name and version sent at connect (CLIENT SETINFO), given once:
    # otherwise redis-py reads its package metadata for every new connection,
    # ~3 ms of CPU, paid by every child a pool forks.
    _CLIENT_OPTIONS = {
        "driver_info": DriverInfo(lib_version=redis.__version__).add_upstream_driver(
            "fastq", __version__
        )
    }

R = TypeVar("R")

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# One enqueue script call carries at most this many jobs (Lua's unpack limit is ~8000
# values). A call is atomic, also against OOM (Redis refuses a script's write only when
# it is the script's first), so a chunk goes in whole or not at all.
ENQUEUE_CHUNK = 1000
# ... and this many when they carry tags or unique locks: each job then costs the
# script two to four times as much, and one call must stay short
ENQUEUE_CHUNK_EXTRAS = 250
# What the first connection of an enqueue_many may raise: mapped already, or raw.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (FastqError, *REDIS_ERRORS)


def _exception_types(types: object, what: str) -> tuple[type[BaseException], ...]:
    """``types`` (one exception class, or an iterable of them) as a tuple."""
    if isinstance(types, type):
        return (types,)  # checked by JobPolicy
    if isinstance(types, (str, bytes)) or not hasattr(types, "__iter__"):
        raise TypeError(f"{what} must be a tuple of exception classes, not {types!r}")
    return tuple(types)


def _chunk(options: EnqueueOptions, unique: Optional[UniquePlan]) -> int:
    """Jobs per enqueue script call."""
    return ENQUEUE_CHUNK if options.tags is None and unique is None else ENQUEUE_CHUNK_EXTRAS


def _call_unique_key(name: str, call: Any) -> str:
    """The default unique key of one call of ``enqueue_many`` (args or kwargs)."""
    if isinstance(call, dict):
        return default_unique_key(name, (), call)
    return default_unique_key(name, call, None)


def _check_url(url: str) -> str:
    try:
        redis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise ValueError(f"invalid Redis URL {url!r}: {exc}") from None
    return url


class App:
    """A fastq application: the registry of jobs and the connection to Redis.

    Args:
        redis_url: where Redis is; without it, ``$FASTQ_REDIS_URL``, else
            ``redis://127.0.0.1:6379/0``. ``--redis-url`` or ``$FASTQ_REDIS_URL``
            given to the CLI override it.
        namespace: prefix of every key, so several apps can share one Redis: 1 to
            100 ASCII letters, digits, ``_``, ``.``, ``-`` or ``:``.
        dead_max_age_s: dead jobs older than this are deleted.
        dead_max_len: the dead set of a queue keeps at most this many jobs.
        max_stalls: a job whose worker died (or hung) running it more often than
            this is a poison job: it goes dead instead of running again.
    """

    def __init__(
        self,
        redis_url: Optional[str] = None,
        *,
        namespace: str = "fastq",
        dead_max_age_s: float = 7 * 24 * 3600,
        dead_max_len: int = 10_000,
        max_stalls: int = 2,
    ) -> None:
        self.redis_url = _check_url(
            redis_url or os.environ.get("FASTQ_REDIS_URL") or DEFAULT_REDIS_URL
        )
        self.namespace = check_namespace(namespace)
        self.dead_max_age_ms = int(dead_max_age_s * 1000)
        self.dead_max_len = int(dead_max_len)
        if max_stalls < 0:
            raise ValueError(f"max_stalls must be >= 0, not {max_stalls}")
        self.max_stalls = int(max_stalls)
        self.registry: dict[str, JobDef[Any]] = {}
        self.schedules: dict[str, PeriodicJob] = {}  # job name -> when it fires
        self.worker_start_hooks: list[Callable[[], None]] = []
        self._ids = IdGenerator()
        self._client: Optional[redis.Redis] = None
        self._client_pid = -1
        self._known_queues: set[str] = set()

    # -- configuration -------------------------------------------------------------

    def configure(
        self, *, redis_url: Optional[str] = None, namespace: Optional[str] = None
    ) -> None:
        """Point the app elsewhere (the CLI applies ``--redis-url`` this way)."""
        if redis_url is not None:
            self.redis_url = _check_url(redis_url)
        if namespace is not None:
            self.namespace = check_namespace(namespace)
        self.close()

    def on_worker_start(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Register ``fn`` to run in every worker process once it starts (after
        the fork, in a pool): open per-process resources there. If it raises,
        the worker does not start (a pool stops rather than crash-loop)."""
        self.worker_start_hooks.append(fn)
        return fn

    def keys(self, queue: str) -> QueueKeys:
        return QueueKeys(self.namespace, queue)

    def new_client(
        self,
        *,
        retries: int = 2,
        socket_timeout_s: Optional[float] = 30.0,
        connect_timeout_s: float = 5.0,
    ) -> redis.Redis:
        """A fresh client. Workers pass ``retries=0``: they must see every
        connection error to know that a reply may have been lost."""
        retry = (
            RedisRetry(ExponentialBackoff(cap=0.5, base=0.05), retries)
            if retries
            else RedisRetry(NoBackoff(), 0)
        )
        return redis.Redis.from_url(
            self.redis_url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=socket_timeout_s,
            retry=retry,
            **_CLIENT_OPTIONS,
        )

    @property
    def redis(self) -> redis.Redis:
        """The producer's client; a new one after fork, never a shared socket."""
        if self._client is None or self._client_pid != os.getpid():
            client = self.new_client()
            with self._producer_call():
                scripts.load_all(client)
            self._client = client
            self._client_pid = os.getpid()
        return self._client

    @contextmanager
    def _producer_call(self) -> Iterator[None]:
        """Redis errors raised inside, as producers raise them: ``RedisUnavailable``,
        ``RedisRefused`` (out of memory, NOPERM, WRONGPASS, busy), or the error
        itself when it is no fault of Redis."""
        try:
            yield
        except FastqError:
            raise
        except REDIS_ERRORS as exc:
            raise for_producer(exc, self.redis_url) from exc

    def close(self) -> None:
        if self._client is not None and self._client_pid == os.getpid():
            self._client.close()
        self._client = None

    # -- registration ----------------------------------------------------------------

    @overload
    def job(self, fn: Callable[..., R]) -> JobDef[R]: ...

    @overload
    def job(
        self,
        fn: None = None,
        *,
        name: Optional[str] = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 5,
        backoff_s: Optional[float] = None,
        max_backoff_s: Optional[float] = None,
        jitter: Optional[float] = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        timeout_s: Optional[float] = None,
        retry: Optional[Backoff] = None,
        retry_delays_s: Optional[Sequence[float]] = None,
        fail_on: tuple[type[BaseException], ...] = (),
        age_limit_s: Optional[float] = None,
        result_ttl_s: Optional[float] = None,
        delivery: str = "at_least_once",
        rate_key: Optional[str] = None,
        rate: Optional[int] = None,
        per_s: float = 1.0,
        burst: Optional[int] = None,
        unique_for_s: Optional[float] = None,
        unique_until: str = "end",
    ) -> Callable[[Callable[..., R]], JobDef[R]]: ...

    def job(
        self,
        fn: Optional[Callable[..., R]] = None,
        *,
        name: Optional[str] = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 5,
        backoff_s: Optional[float] = None,
        max_backoff_s: Optional[float] = None,
        jitter: Optional[float] = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        timeout_s: Optional[float] = None,
        retry: Optional[Backoff] = None,
        retry_delays_s: Optional[Sequence[float]] = None,
        fail_on: tuple[type[BaseException], ...] = (),
        age_limit_s: Optional[float] = None,
        result_ttl_s: Optional[float] = None,
        delivery: str = "at_least_once",
        rate_key: Optional[str] = None,
        rate: Optional[int] = None,
        per_s: float = 1.0,
        burst: Optional[int] = None,
        unique_for_s: Optional[float] = None,
        unique_until: str = "end",
    ) -> Union[JobDef[R], Callable[[Callable[..., R]], JobDef[R]]]:
        """Register a function as a job, by its ``__name__`` unless ``name`` is given.

        Args:
            name: the job's name in payloads (default: the function's ``__name__``).
            queue: the queue its jobs go to.
            priority: higher runs first (an int within ±2**20).
            retries: further attempts after the first, when it fails.
            backoff_s, max_backoff_s, jitter: the default exponential backoff:
                ``backoff_s * 2**n`` (1 s) up to ``max_backoff_s`` (300 s), the top
                ``jitter`` fraction (0.5) of each delay randomised. Shorthand for
                ``retry=fastq.Exponential(...)``.
            retry: the retry policy: ``fastq.Exponential``, ``fastq.Polynomial``
                (Sidekiq's), ``fastq.BoundedDoubling`` (App Engine's),
                ``fastq.Geometric`` or ``fastq.Delays``.
            retry_delays_s: every delay in seconds, the last repeated; shorthand
                for ``retry=fastq.Delays([...])``.
            retry_on: only these exceptions are retried; others fail at once.
            fail_on: these exceptions fail at once (checked before ``retry_on``).
            timeout_s: a hard limit on one run (SIGALRM).
            age_limit_s: no retry starts later than this many seconds after the
                job was first enqueued, whatever its attempts: it goes dead.
            result_ttl_s: keep each run's return value (as JSON) this many
                seconds, for :meth:`result`. A value JSON cannot encode (or NaN,
                or above ``limits.MAX_RESULT_BYTES``) fails the run with
                ``fastq.ResultNotSerializable``. Default: return values are dropped.
            delivery: ``"at_least_once"`` (default): a job whose worker dies mid-run
                runs again. ``"at_most_once"``: the worker takes the job out of the
                queue before running it, so it never runs twice, but a worker that
                dies meanwhile loses it; it is never retried (a failure, ``Retry``
                or timeout sends it to the dead set; ``retries`` and an enqueue's
                ``retries=`` do not apply), nor handed back once started.
            rate_key, rate, per_s, burst: a per-key rate limit: at most ``rate``
                starts per ``per_s`` seconds of the jobs whose ``rate_key``, a
                format string of the job's parameters (``"smtp:{account}"``), gives
                the same key, across every worker (``burst`` as
                :meth:`set_rate_limit`'s). A job whose key has no token now is
                rescheduled to the token reserved for it, without counting an
                attempt (see :mod:`fastq.ratekey`).
            unique_for_s: its jobs are unique for this many seconds: an enqueue
                while a job of the same key (a hash of the name and arguments, or
                ``unique_key=``) holds the lock adds nothing and returns that
                job's id. Periodic runs and retries are not checked.
            unique_until: when the lock ends before its window does: ``"end"``
                (the job completes, dies, is cancelled or purged), ``"start"``
                (it starts: one copy may wait while one runs) or ``"window"``
                (never early).

        Raises:
            TypeError: ``fn`` is not a plain callable a worker can run: not
                callable, a coroutine function (``async def``, also behind
                ``functools.partial`` or an async ``__call__``), an async
                generator or a generator function; or it has no ``__name__`` and
                no ``name`` was given; ``delivery`` is not a string.
            ValueError: another function is already registered under that name, an
                option is out of range (``result_ttl_s`` not a finite number in
                (0, 30 days], ``delivery`` not one of the two), a retry option
                (``retry``, ``backoff_s``, ``retry_delays_s``, ``age_limit_s``...)
                given to an at-most-once job, options of two retry policies given
                together (``retry=`` with ``backoff_s``, ``retry_delays_s`` with
                ``backoff_s``, ...), ``rate_key`` without ``rate`` or the other
                way round, a ``rate_key`` field that is not a parameter's ``{name}``,
                or a bad ``rate``/``per_s``/``burst`` (as :meth:`set_rate_limit`).
        """
        validate_queue_name(queue)
        check_priority(priority)
        if result_ttl_s is not None:
            check_result_ttl_s(result_ttl_s)
        mode = check_delivery(delivery)
        if mode is Delivery.AT_MOST_ONCE:
            given = {
                "retry": retry, "backoff_s": backoff_s, "max_backoff_s": max_backoff_s,
                "jitter": jitter, "retry_delays_s": retry_delays_s, "age_limit_s": age_limit_s,
            }  # fmt: skip
            retry_options = [option for option, value in given.items() if value is not None]
            if retry_options:
                raise ValueError(
                    f"an at-most-once job is never retried: {', '.join(retry_options)} "
                    "would never apply"
                )
        if mode is Delivery.AT_MOST_ONCE and rate_key is not None:
            raise ValueError(
                "rate_key= cannot apply to an at-most-once job: a job waiting for its key's "
                "token is rescheduled, and an at-most-once job has left the queue by then"
            )
        key_limit = None
        if rate_key is not None or rate is not None:
            if rate_key is None or rate is None:
                raise ValueError(
                    "a per-key rate limit needs both rate_key= and rate= (a limit of the "
                    "whole queue is app.set_rate_limit(queue, rate))"
                )
            key_limit = check_rate_limit(rate, per_s, burst)
        if unique_for_s is not None:
            check_unique_for_s(unique_for_s)
        check_unique_until(unique_until)
        policy = JobPolicy(
            retries=retries,
            backoff=policy_from_keywords(retry, backoff_s, max_backoff_s, jitter, retry_delays_s),
            retry_on=_exception_types(retry_on, "retry_on"),
            timeout_s=timeout_s,
            fail_on=_exception_types(fail_on, "fail_on"),
            age_limit_s=age_limit_s,
        )

        def register(func: Callable[..., R]) -> JobDef[R]:
            job_name = name or getattr(func, "__name__", None)
            if not isinstance(job_name, str) or not job_name:
                raise TypeError(f"cannot register {func!r} as a job: give it a name=")
            check_runnable(func, job_name)
            existing = self.registry.get(job_name)
            if existing is not None and existing.fn is not func:
                raise ValueError(f"a job named {job_name!r} is already registered: {existing.fn!r}")
            key = None if key_limit is None else RateKey(func, rate_key, key_limit)
            jobdef = JobDef(
                self, func, job_name, queue, priority, policy, result_ttl_s, mode,
                rate_key=key, unique_for_s=unique_for_s, unique_until=unique_until,
            )  # fmt: skip
            self.registry[job_name] = jobdef
            return jobdef

        return register(fn) if fn is not None else register

    def periodic(
        self,
        *,
        every_s: Optional[float] = None,
        cron: Optional[str] = None,
        tz: Union[str, tzinfo, None] = None,
        overlap: bool = False,
        args: Sequence[Any] = (),
        kwargs: Optional[dict[str, Any]] = None,
        **job_options: Any,
    ) -> Callable[[Union[Callable[..., R], JobDef[R]]], JobDef[R]]:
        """Register a job that fires on a schedule; the reapers enqueue its runs.

        ``@app.periodic(every_s=300)`` or ``@app.periodic(cron="*/5 * * * *",
        tz="Europe/Berlin")`` on a function registers it as ``@app.job`` would
        (``job_options``: ``queue``, ``priority``, ``retries``, ...); on a job
        already registered (``@app.periodic(...)`` above ``@app.job(...)``) it
        schedules that job. Returns the job, which can still be enqueued by hand.

        Each slot fires once across every reaper of every host, also when its run
        has finished before a late reaper looks. Slots missed while no reaper ran
        give one run on return, not one per slot. A schedule never fired before
        starts at its next slot. ``every_s`` slots are the multiples of ``every_s``
        since the Unix epoch (``every_s=3600``: on the hour, UTC); cron times are
        computed by cronsim in ``tz``, with Debian cron's DST rules (see
        :mod:`fastq.periodic`).

        Args:
            every_s: fire every this many seconds (1 s to ten years).
            cron: a standard 5-field cron expression (names of days and months,
                ranges, lists and steps) or ``@hourly``, ``@daily``, ``@weekly``,
                ``@monthly``, ``@yearly``; needs ``pip install 'fastq[cron]'``.
            tz: the cron expression's time zone, an IANA name or a tzinfo (UTC).
            overlap: False (the default): a slot whose previous run is still
                queued, scheduled for a retry or running is skipped (counted as
                ``periodic_skipped`` in the queue's stats); True: every slot fires.
            args, kwargs: what each run is called with.

        Raises:
            ValueError: both or neither of ``every_s`` and ``cron``, ``every_s`` not
                a finite number within range, an invalid cron expression, an unknown
                time zone, ``tz`` with ``every_s``, or the job already has a schedule.
            TypeError: an argument of the wrong type, ``args``/``kwargs`` that do not
                fit the function or are not JSON, or what ``@app.job`` refuses.
            ImportError: ``cron=`` without cronsim installed.
            Nothing is registered when it raises.
        """
        schedule = make_schedule(every_s=every_s, cron=cron, tz=tz)
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, not {type(overlap).__name__}")
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
        run_kwargs = dict(kwargs or {})

        def register(func: Union[Callable[..., R], JobDef[R]]) -> JobDef[R]:
            if isinstance(func, JobDef):
                if func.producer is not self:
                    raise ValueError(f"{func!r} is registered with another app")
                if job_options:
                    raise TypeError(
                        f"job options {sorted(job_options)} go on @app.job when "
                        "@app.periodic is given a registered job"
                    )
                existing: Optional[JobDef[R]] = func
                func = func.fn
            else:
                existing = None
            job_name = job_options.get("name") or getattr(func, "__name__", None)
            if existing is not None:
                job_name = existing.name
            if isinstance(job_name, str) and job_name in self.schedules:
                raise ValueError(f"job {job_name!r} already has a schedule")
            # checked before anything is registered, so that a refusal leaves no trace
            ArgChecker(func).check(args, run_kwargs)
            codec.encode_envelope("check", list(args), run_kwargs, b"}")
            jobdef = existing if existing is not None else self.job(**job_options)(func)
            self.schedules[jobdef.name] = PeriodicJob(
                name=jobdef.name,
                queue=jobdef.queue,
                priority=jobdef.priority,
                schedule=schedule,
                overlap=overlap,
                args=tuple(args),
                kwargs=run_kwargs,
            )
            return jobdef

        return register

    # -- enqueue -------------------------------------------------------------------

    def _route(self, name: str, options: EnqueueOptions) -> tuple[str, int]:
        if not isinstance(name, str) or not name:
            raise TypeError(f"job name must be a non-empty str, not {name!r}")
        jobdef = self.registry.get(name)
        queue = options.queue
        if queue is None:
            queue = jobdef.queue if jobdef else "default"
        priority = options.priority
        if priority is None:
            priority = jobdef.priority if jobdef else 0
        return queue, priority

    def _tail(self, name: str, queue: str, priority: int, options: EnqueueOptions) -> bytes:
        shared: dict[str, Any] = {
            "name": name,
            "queue": queue,
            "enqueued_at": int(time.time() * 1000),
            "priority": priority,
        }
        if not (options.retry is None and options.retries is None and options.age_limit_s is None):
            # the retry overrides that differ from the job's own policy, so that a
            # worker of any host applies them; the common enqueue adds nothing
            jobdef = self.registry.get(name)
            own = jobdef.policy if jobdef is not None else None
            shared.update(
                envelope_overrides(
                    (own.backoff, own.retries, own.age_limit_s) if own is not None else None,
                    options.retry,
                    options.retries,
                    options.age_limit_s,
                )
            )
        tail: bytes = codec.envelope_tail(shared)
        return tail

    def _connect(self, queue: str) -> Redis:
        """The client, with ``queue`` known to the namespace before it holds a job."""
        client = self.redis
        if queue not in self._known_queues:
            client.sadd(f"{self.namespace}:queues", queue)
            self._known_queues.add(queue)
        return client

    def _send(
        self,
        client: Redis,
        queue: str,
        priority: int,
        options: EnqueueOptions,
        ids: Sequence[str],
        envs: Sequence[bytes],
        unique: Optional[UniquePlan] = None,
        unique_keys: Sequence[str] = (),
    ) -> list[Any]:
        """Send the jobs, one script call per chunk, pipelined; returns each chunk's
        reply (an ``EnqueueReply``) or the error it got. Raises what stopped it from
        reading them."""
        keys = ENQUEUE.keys_for(self.keys(queue))
        due = options.due
        extras = enqueue_extras(
            options.tags or (),
            unique.until if unique is not None else None,
            unique.window_ms if unique is not None else 0,
        )
        commands = []
        chunk = _chunk(options, unique)
        for lo in range(0, len(ids), chunk):
            hi = lo + chunk
            ukeys = unique_keys[lo:hi] if unique is not None else None
            argv = ENQUEUE.argv(priority, due, extras, ids[lo:hi], envs[lo:hi], ukeys)
            commands.append(ENQUEUE.command(keys, argv))
        replies = scripts.call_many(client, commands, raise_on_error=False)
        return [r if isinstance(r, Exception) else ENQUEUE.parse(r) for r in replies]

    def enqueue(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Optional[dict[str, Any]] = None,
        *,
        queue: Optional[str] = None,
        job_id: Optional[str] = None,
        priority: Optional[int] = None,
        delay_s: float = 0,
        at: Union[datetime, float, None] = None,
        retry: Optional[Backoff] = None,
        retries: Optional[int] = None,
        age_limit_s: Optional[float] = None,
        tags: Optional[Sequence[str]] = None,
        unique_for_s: Optional[float] = None,
        unique_key: Optional[str] = None,
        unique_until: Optional[str] = None,
    ) -> str:
        """Enqueue one job by its registered name; returns the job id (for a unique
        job refused because its key's lock is held: the id of the job holding it).

        A job name this app does not know is accepted (another service may run it)
        and sent to ``queue`` or ``"default"``. A ``job_id`` makes the call
        idempotent: while a job with that id exists, enqueueing it again does
        nothing. Options as in :meth:`fastq.JobDef.enqueue_with`.

        Raises:
            TypeError: args do not fit the registered function, or are not
                JSON-serializable (NaN and infinities included); nothing is sent.
            ValueError: bad queue name, job id, priority, delay or ``at`` (a naive
                datetime included); nothing is sent.
            TypeError: ``delay_s`` and ``at`` both given; nothing is sent.
            fastq.RedisUnavailable: Redis could not be reached.
            fastq.RedisRefused: Redis refused the write (out of memory, ACL).
        """
        options = EnqueueOptions(
            delay_s=delay_s, at=at, priority=priority, job_id=job_id, queue=queue,
            retry=retry, retries=retries, age_limit_s=age_limit_s, tags=tags,
            unique_for_s=unique_for_s, unique_key=unique_key, unique_until=unique_until,
        )  # fmt: skip
        return self.submit(name, args, kwargs, options)

    def submit(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]],
        options: EnqueueOptions,
    ) -> str:
        """:meth:`enqueue` with its options made (``JobDef`` enqueues through this)."""
        queue, priority = self._route(name, options)
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
        jobdef = self.registry.get(name)
        if jobdef is not None:
            jobdef.arg_checker.check(args, kwargs)
        unique = unique_plan(options, jobdef)
        job_id = options.job_id if options.job_id is not None else self._ids.next_ids(1)[0]
        env = codec.encode_envelope(
            job_id, args, kwargs, self._tail(name, queue, priority, options)
        )
        ukeys = []
        if unique is not None:
            ukeys.append(unique.key or default_unique_key(name, args, kwargs))
        with self._producer_call():
            client = self._connect(queue)
            replies = self._send(client, queue, priority, options, [job_id], [env], unique, ukeys)
            if isinstance(replies[0], Exception):
                raise replies[0]
        # a unique job refused by a held lock: the id of the job holding it
        holder: str = replies[0].holders.get(0, job_id)
        return holder

    def enqueue_many(
        self,
        name: str,
        calls: Iterable[Any],
        *,
        queue: Optional[str] = None,
        job_ids: Optional[Sequence[str]] = None,
        priority: Optional[int] = None,
        delay_s: float = 0,
        at: Union[datetime, float, None] = None,
        retry: Optional[Backoff] = None,
        retries: Optional[int] = None,
        age_limit_s: Optional[float] = None,
        tags: Optional[Sequence[str]] = None,
        unique_for_s: Optional[float] = None,
        unique_key: Optional[str] = None,
        unique_until: Optional[str] = None,
    ) -> list[str]:
        """Enqueue many calls of one job in pipelined batches; returns their ids (a
        unique job refused by a held lock gives the holder's id in its place).

        Each call is a tuple/list of positional arguments or a dict of keyword
        arguments. All calls are checked and encoded before anything is sent.
        Options as in :meth:`fastq.JobDef.enqueue_with`: with ``at``, every job is
        due in the same millisecond (of Redis' clock) and they start in order.

        The jobs go in chunks of ``ENQUEUE_CHUNK`` (1,000; 250 with tags or unique
        locks), each one atomic script
        call, all in one round trip. When Redis takes only some chunks (it fills
        up), or the connection is lost, :class:`fastq.EnqueueError` says which ids
        went in. Sending the same calls again with ``job_ids=exc.ids`` is
        idempotent: ids already in Redis are left alone::

            try:
                ids = app.enqueue_many("send_email", calls)
            except fastq.EnqueueError as exc:
                ...  # once Redis has room (or is back)
                ids = app.enqueue_many("send_email", calls, job_ids=exc.ids)

        Raises:
            TypeError: a call does not fit the function or is not JSON-serializable
                (NaN and infinities included; the message names its index);
                nothing is sent.
            ValueError: ``job_ids`` has the wrong length, repeats an id, or holds an
                invalid one; a bad queue name, priority, delay or ``at``; nothing is
                sent. (``TypeError`` for ``delay_s`` and ``at`` both given.)
            fastq.EnqueueError: Redis refused some or all chunks (out of memory, an
                ACL); ``written`` went in, ``not_written`` did not.
            fastq.EnqueueInterrupted: Redis could not be reached, or the connection
                was lost mid-blast: ``written`` went in, ``not_written`` may have.
                An ``EnqueueError`` and a ``fastq.RedisUnavailable`` both.
        """
        options = EnqueueOptions(
            delay_s=delay_s, at=at, priority=priority, queue=queue,
            retry=retry, retries=retries, age_limit_s=age_limit_s, tags=tags,
            unique_for_s=unique_for_s, unique_key=unique_key, unique_until=unique_until,
        )  # fmt: skip
        return self.submit_many(name, calls, options, job_ids)

    def submit_many(
        self,
        name: str,
        calls: Iterable[Any],
        options: EnqueueOptions,
        job_ids: Optional[Sequence[str]] = None,
    ) -> list[str]:
        """:meth:`enqueue_many` with its options made (``JobDef`` enqueues through this)."""
        if options.job_id is not None:
            raise TypeError("enqueue_many takes job_ids=[...], one per call, not job_id")
        queue, priority = self._route(name, options)
        calls = calls if isinstance(calls, list) else list(calls)
        jobdef = self.registry.get(name)
        if jobdef is not None:
            self._check_calls(jobdef.arg_checker, calls)
        unique = unique_plan(options, jobdef)
        if job_ids is None:
            ids = self._ids.next_ids(len(calls))
        else:
            ids = list(job_ids)
            if len(ids) != len(calls):
                raise ValueError(f"{len(ids)} job_ids for {len(calls)} calls")
            for i, job_id in enumerate(ids):
                try:
                    check_job_id(job_id)
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"job_ids[{i}]: {exc}") from None
            if len(set(ids)) != len(ids):
                raise ValueError("job_ids repeat an id")
        envs = codec.encode_calls(ids, calls, self._tail(name, queue, priority, options))
        if not ids:
            return ids
        ukeys: list[str] = []
        if unique is not None:
            ukeys = [unique.key or _call_unique_key(name, call) for call in calls]
        try:
            client = self._connect(queue)
        except _CONNECT_ERRORS as exc:
            raise self._blast_error(ids, [], exc, sent=False) from exc
        try:
            replies = self._send(client, queue, priority, options, ids, envs, unique, ukeys)
        except REDIS_ERRORS as exc:
            # Sent, but no reply read (redis-py reads a pipeline's replies all or
            # none, after resending it on its own retries): some may be in.
            raise self._blast_error(ids, [], exc, sent=True) from exc
        chunk = _chunk(options, unique)
        failed = [c for c, reply in enumerate(replies) if isinstance(reply, Exception)]
        if failed:
            written = [
                job_id
                for c in range(len(replies))
                if c not in failed
                for job_id in ids[c * chunk : (c + 1) * chunk]
            ]
            raise self._blast_error(ids, written, replies[failed[0]], sent=True) from replies[
                failed[0]
            ]
        if unique is not None:
            # each unique job refused by a held lock: the id of the job holding it
            ids = list(ids)
            for c, reply in enumerate(replies):
                for i, holder in reply.holders.items():
                    ids[c * chunk + i] = holder
        return ids

    def _blast_error(
        self, ids: list[str], written: list[str], cause: BaseException, *, sent: bool
    ) -> EnqueueError:
        """The EnqueueError of a blast that Redis took only part of (or none)."""
        done = set(written)
        not_written = [job_id for job_id in ids if job_id not in done]
        fault = classify(cause)
        if isinstance(cause, FastqError) and cause.__cause__ is not None:
            fault = classify(cause.__cause__) or fault
        how = fault.value if fault is not None else "error"
        retry = "; retry with job_ids=exc.ids (idempotent)"
        if fault is Fault.UNAVAILABLE:
            maybe = "may or may not have gone in" if sent else "did not go in"
            return EnqueueInterrupted(
                f"cannot reach Redis at {self.redis_url} ({cause}): {len(written)} of "
                f"{len(ids)} jobs are in, the other {len(not_written)} {maybe}{retry}",
                ids=ids, written=written, not_written=not_written, fault=how,
            )  # fmt: skip
        return EnqueueError(
            f"Redis at {self.redis_url} took {len(written)} of {len(ids)} jobs, "
            f"{len(not_written)} did not go in ({how}: {cause}){retry}",
            ids=ids, written=written, not_written=not_written, fault=how,
        )  # fmt: skip

    @staticmethod
    def _check_calls(checker: ArgChecker, calls: list[Any]) -> None:
        for i, call in enumerate(calls):
            try:
                if isinstance(call, (tuple, list)):
                    checker.check(call, None)
                elif isinstance(call, dict):
                    checker.check((), call)
            except TypeError as exc:
                raise TypeError(f"call {i}: {exc}") from None

    # -- inspection ----------------------------------------------------------------

    def stats(self, queue: str) -> dict[str, int]:
        """Counts of one queue: ready, inflight, scheduled, dead, broken, and the
        counters enqueued, processed, failed, retried, stalled, stale_acks, purged,
        cancelled (``ready`` counts cancelled ids still in the list until popped);
        ``paused`` is 1 while the queue is paused, else 0; ``rate``,
        ``rate_period_ms`` and ``rate_burst`` its rate limit (all 0: none).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        keys = self.keys(validate_queue_name(queue))
        with self._producer_call():
            return queue_stats(self.redis, keys)

    # -- flow control --------------------------------------------------------------

    def _known_queue(self, queue: str) -> QueueKeys:
        """The keys of ``queue``, a queue this namespace knows (see :meth:`queues`).

        Raises:
            TypeError, ValueError: an invalid name; ValueError: an unknown queue.
        """
        validate_queue_name(queue)
        known = self.queues()
        if queue not in known:
            raise ValueError(
                f"unknown queue {queue!r}: no job was ever enqueued on it and no job of "
                f"this app is registered on it (known: {', '.join(known) or 'none'})"
            )
        return self.keys(queue)

    def pause(self, queue: str) -> None:
        """Stop workers claiming from ``queue`` (on every host) until :meth:`resume`.

        Jobs workers hold finish and are acknowledged; waiting jobs stay queued,
        enqueues still add to it, and nothing is lost or run twice. Idle workers
        sleep until the resume wakes them. The pause lives in Redis, in the
        queue's settings, so it survives restarts of workers and of the app.

        Raises:
            TypeError, ValueError: an invalid or unknown queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self._producer_call():
            flow.pause(self.redis, self._known_queue(queue))

    def resume(self, queue: str) -> None:
        """Lift a pause of ``queue`` and wake its idle workers at once; a no-op on a
        queue that is not paused.

        Raises:
            TypeError, ValueError: an invalid or unknown queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self._producer_call():
            flow.resume(self.redis, self._known_queue(queue))

    def set_rate_limit(
        self,
        queue: str,
        rate: Optional[int],
        *,
        per_s: float = 1.0,
        burst: Optional[int] = None,
    ) -> None:
        """Let at most ``rate`` jobs of ``queue`` start per ``per_s`` seconds, across
        every worker of every host; ``rate=None`` lifts the limit.

        The limit is checked inside the claim: a claim takes no more jobs than it
        allows, and a worker it stops sleeps until the next token is due. Starts
        are spaced evenly (one every ``per_s / rate``); after a quiet spell up to
        ``burst`` start at once, so any window of ``per_s`` sees at most
        ``rate + burst - 1`` starts. Retries count again (each attempt is a
        start); a pause stops claims whatever the limit. Setting a limit starts
        it afresh and wakes the queue's idle workers.

        Args:
            rate: jobs per period, an int within 1..1,000,000; None: no limit.
            per_s: the period in seconds, whole milliseconds within [0.001, 86400];
                at most 1,000,000 jobs a second.
            burst: an int within 1..1,000,000; default: the jobs of 50 ms at this
                rate, at least 1 (1 for 14/s, 5 for 100/s). 1: strictly evenly spaced.

        Raises:
            TypeError, ValueError: a bad rate, period or burst, or an invalid or
                unknown queue; nothing is written then.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        limit = None if rate is None else check_rate_limit(rate, per_s, burst)
        with self._producer_call():
            flow.set_rate_limit(self.redis, self._known_queue(queue), limit)

    def rate_limit(self, queue: str) -> Optional[RateLimit]:
        """The rate limit of ``queue`` (``str()`` of it reads ``14/s (burst 1)``),
        None when it has none.

        Raises:
            TypeError, ValueError: an invalid queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        keys = self.keys(validate_queue_name(queue))
        with self._producer_call():
            return flow.rate_limit(self.redis, keys)

    def purge(
        self,
        queue: str,
        *,
        ready: bool = True,
        scheduled: bool = True,
        dead: bool = False,
        broken: bool = False,
    ) -> int:
        """Delete the waiting jobs of ``queue``: their envelopes and index entries.

        Jobs held by workers (in flight) are never touched. Deletes in calls of
        at most 1,000 jobs, so that a big queue never blocks Redis for long
        (other clients run between the calls).

        Args:
            ready: jobs ready to run (priority ones included).
            scheduled: delayed jobs and retries waiting out their backoff.
            dead: jobs that failed for good.
            broken: jobs that could not run (bad payload, unknown job).

        Returns:
            How many jobs were deleted (also added to the queue's ``purged`` count).

        Raises:
            TypeError, ValueError: an invalid or unknown queue name; ValueError:
                nothing selected.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        selected = {"ready": ready, "scheduled": scheduled, "dead": dead, "broken": broken}
        for name, value in selected.items():
            if not isinstance(value, bool):
                raise TypeError(f"purge: {name} must be True or False, not {value!r}")
        if not any(selected.values()):
            raise ValueError("purge: nothing selected (ready, scheduled, dead and broken are off)")
        with self._producer_call():
            keys = self._known_queue(queue)
            return flow.purge(self.redis, keys, **selected)

    def queues(self) -> list[str]:
        """Every queue this namespace has seen an enqueue for, or has registered.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self._producer_call():
            members = self.redis.smembers(f"{self.namespace}:queues")
        seen = {q.decode() if isinstance(q, bytes) else str(q) for q in members}
        return sorted(seen | {j.queue for j in self.registry.values()})

    def get_job(self, job_id: str, queue: Optional[str] = None) -> Optional[JobInfo]:
        """What fastq knows of a job: state, attempts, last error, timestamps.

        Returns None for an unknown id, and for a job that completed (completed
        jobs are deleted). Without ``queue``, every known queue is searched.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self._producer_call():
            candidates = [validate_queue_name(queue)] if queue else self.queues()
            for q in candidates:
                info = get_job(self.redis, self.keys(q), job_id)
                if info is not None:
                    return info
        return None

    # -- cancel and tags ------------------------------------------------------------

    def cancel(self, job_id: str, queue: Optional[str] = None) -> bool:
        """Cancel a job: a ready or scheduled job never runs. A job a worker
        already holds (running, or claimed with its batch) still runs, but is not
        retried, recorded dead or handed back when its run ends; if it completes,
        it counts as processed and is no longer cancelled. ``get_job`` says
        ``cancelled``; the queue's stats count it as ``cancelled``.

        Without ``queue``, every known queue is searched. Re-enqueueing a
        cancelled id does nothing (while its marker lasts: the dead jobs' max age).

        Returns:
            True if it was cancelled; False for an unknown id, a job that
            completed, is dead or broken, or was cancelled before.

        Raises:
            TypeError, ValueError: an invalid job id or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_job_id(job_id)
        with self._producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            for q in names:
                if cancel_ids(self.redis, self.keys(q), [job_id]):
                    return True
        return False

    def cancel_by_tag(self, tag: str, queue: Optional[str] = None) -> int:
        """Cancel every live job tagged ``tag`` (in ``queue``, or in every known
        queue), as :meth:`cancel` does, in calls of at most 250 jobs so that
        cancelling a blast of any size never blocks Redis for long.

        Returns:
            How many jobs were cancelled.

        Raises:
            TypeError, ValueError: an invalid tag or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_tag(tag)
        with self._producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            return sum(cancel_by_tag(self.redis, self.keys(q), tag) for q in names)

    def jobs_by_tag(
        self,
        tag: str,
        queue: Optional[str] = None,
        cursor: Optional[str] = None,
        count: int = 100,
    ) -> TagPage:
        """A page of the live jobs tagged ``tag``, each with its queue and state
        (``queued``, ``scheduled``, ``active``; ``gone`` if it ended meanwhile),
        in queue then id order. Jobs leave the tag when they end (done, dead,
        broken, cancelled, purged).

        Args:
            tag: the tag.
            queue: one queue; without it every known queue, one after the other.
            cursor: the ``cursor`` of the previous page (None: the first page).
            count: jobs per page, 1 to 1,000.

        Returns:
            A :class:`fastq.introspect.TagPage`: ``jobs`` and ``cursor`` (None on
            the last page).

        Raises:
            TypeError, ValueError: an invalid tag, queue name, cursor or count.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_tag(tag)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise ValueError(f"count must be an int within 1..1000, not {count!r}")
        after: Optional[str] = None
        with self._producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            if cursor is not None:
                # "<queue>:<last id>": queue names hold no ':'
                if not isinstance(cursor, str) or ":" not in cursor:
                    raise ValueError(f"invalid cursor {cursor!r}: pass a page's cursor")
                at_queue, after = cursor.split(":", 1)
                if at_queue not in names:
                    raise ValueError(f"invalid cursor {cursor!r}: unknown queue {at_queue!r}")
                names = names[names.index(at_queue) :]
            jobs: list[TaggedJob] = []
            for q in names:
                keys = self.keys(q)
                ids = tagged_ids(self.redis, keys, tag, after, count - len(jobs) + 1)
                after = None
                more = len(ids) > count - len(jobs)
                ids = ids[: count - len(jobs)]
                states = job_states(self.redis, keys, ids)
                jobs += [TaggedJob(i, q, state) for i, state in zip(ids, states)]
                if more or (len(jobs) == count and q != names[-1]):
                    return TagPage(jobs, f"{q}:{jobs[-1].id}")
        return TagPage(jobs, None)

    def result(self, job_id: str, timeout_s: float = 30.0, queue: Optional[str] = None) -> Any:
        """Wait for a job's return value and return it. The job must be registered
        with ``result_ttl_s``; the value is read as JSON (tuples come back as lists).

        It blocks on the job's result-ready list (``BLPOP``), looking at the job's
        state between blocks of at most a second, so it never polls in a tight loop.

        Args:
            job_id: the id ``enqueue`` returned.
            timeout_s: how long to wait, in seconds (0: look once).
            queue: the job's queue; without it every known queue is looked at.

        Returns:
            The job's return value.

        Raises:
            fastq.JobFailed: the job is dead or broken; it carries the job's last
                error (``error``) and ``traceback``.
            fastq.NoResult: the job is gone without a result: an unknown id, a job
                without ``result_ttl_s``, or a result that expired.
            fastq.ResultTimeout: (a ``TimeoutError``) it did not finish in time.
            ValueError, TypeError: ``timeout_s`` is not a finite number >= 0, or
                ``job_id`` or ``queue`` is not valid.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_job_id(job_id)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
            raise TypeError(f"timeout_s must be a number of seconds, not {timeout_s!r}")
        if not math.isfinite(timeout_s) or timeout_s < 0:
            raise ValueError(f"timeout_s must be a finite number >= 0, not {timeout_s!r}")
        with self._producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            candidates = [self.keys(q) for q in names]
            return wait_for_result(self.redis, candidates, job_id, float(timeout_s))

    def job_queues(self) -> list[str]:
        """The queues this app registers jobs on, periodic ones included, in the order
        registered (``["default"]`` when none): what a worker or a pool serves when
        started without ``-q``."""
        return list(dict.fromkeys(job.queue for job in self.registry.values())) or ["default"]
