"""The producer API: an App registers jobs and enqueues them."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar, Union, overload

import redis
from redis import Redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry as RedisRetry

from fastq import scripts
from fastq._accel import codec
from fastq._version import __version__
from fastq.contracts import ENQUEUE
from fastq.errors import EnqueueError, EnqueueInterrupted, FastqError
from fastq.introspect import JobInfo, get_job, queue_stats
from fastq.job import (
    ArgChecker,
    EnqueueOptions,
    IdGenerator,
    JobDef,
    JobPolicy,
    check_runnable,
)
from fastq.keys import QueueKeys, validate_queue_name
from fastq.limits import check_job_id, check_namespace, check_priority
from fastq.redis_faults import REDIS_ERRORS, Fault, classify, for_producer

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
# What the first connection of an enqueue_many may raise: mapped already, or raw.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (FastqError, *REDIS_ERRORS)


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
        backoff_s: float = 1.0,
        max_backoff_s: float = 300.0,
        jitter: float = 0.5,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        timeout_s: Optional[float] = None,
    ) -> Callable[[Callable[..., R]], JobDef[R]]: ...

    def job(
        self,
        fn: Optional[Callable[..., R]] = None,
        *,
        name: Optional[str] = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 300.0,
        jitter: float = 0.5,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        timeout_s: Optional[float] = None,
    ) -> Union[JobDef[R], Callable[[Callable[..., R]], JobDef[R]]]:
        """Register a function as a job, by its ``__name__`` unless ``name`` is given.

        Raises:
            TypeError: ``fn`` is not a plain callable a worker can run: not
                callable, a coroutine function (``async def``, also behind
                ``functools.partial`` or an async ``__call__``), an async
                generator or a generator function; or it has no ``__name__`` and
                no ``name`` was given.
            ValueError: another function is already registered under that name, or
                an option is out of range.
        """
        validate_queue_name(queue)
        check_priority(priority)
        policy = JobPolicy(
            retries=retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            jitter=jitter,
            retry_on=tuple(retry_on),
            timeout_s=timeout_s,
        )

        def register(func: Callable[..., R]) -> JobDef[R]:
            job_name = name or getattr(func, "__name__", None)
            if not isinstance(job_name, str) or not job_name:
                raise TypeError(f"cannot register {func!r} as a job: give it a name=")
            check_runnable(func, job_name)
            existing = self.registry.get(job_name)
            if existing is not None and existing.fn is not func:
                raise ValueError(f"a job named {job_name!r} is already registered: {existing.fn!r}")
            jobdef = JobDef(self, func, job_name, queue, priority, policy)
            self.registry[job_name] = jobdef
            return jobdef

        return register(fn) if fn is not None else register

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

    def _tail(self, name: str, queue: str, priority: int) -> bytes:
        tail: bytes = codec.envelope_tail(
            {
                "name": name,
                "queue": queue,
                "enqueued_at": int(time.time() * 1000),
                "priority": priority,
            }
        )
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
    ) -> list[Any]:
        """Send the jobs, one script call per chunk, pipelined; returns each chunk's
        reply or the error it got. Raises what stopped it from reading them."""
        keys = ENQUEUE.keys_for(self.keys(queue))
        due = options.due
        commands = []
        for lo in range(0, len(ids), ENQUEUE_CHUNK):
            hi = lo + ENQUEUE_CHUNK
            argv = ENQUEUE.argv(priority, due, ids[lo:hi], envs[lo:hi])
            commands.append(ENQUEUE.command(keys, argv))
        return scripts.call_many(client, commands, raise_on_error=False)

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
    ) -> str:
        """Enqueue one job by its registered name; returns the job id.

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
            delay_s=delay_s, at=at, priority=priority, job_id=job_id, queue=queue
        )
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
        job_id = options.job_id if options.job_id is not None else self._ids.next_ids(1)[0]
        env = codec.encode_envelope(job_id, args, kwargs, self._tail(name, queue, priority))
        with self._producer_call():
            client = self._connect(queue)
            replies = self._send(client, queue, priority, options, [job_id], [env])
            if isinstance(replies[0], Exception):
                raise replies[0]
        return job_id

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
    ) -> list[str]:
        """Enqueue many calls of one job in pipelined batches; returns their ids.

        Each call is a tuple/list of positional arguments or a dict of keyword
        arguments. All calls are checked and encoded before anything is sent.
        Options as in :meth:`fastq.JobDef.enqueue_with`: with ``at``, every job is
        due in the same millisecond (of Redis' clock) and they start in order.

        The jobs go in chunks of ``ENQUEUE_CHUNK`` (1,000), each one atomic script
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
        options = EnqueueOptions(delay_s=delay_s, at=at, priority=priority, queue=queue)
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
        envs = codec.encode_calls(ids, calls, self._tail(name, queue, priority))
        if not ids:
            return ids
        try:
            client = self._connect(queue)
        except _CONNECT_ERRORS as exc:
            raise self._blast_error(ids, [], exc, sent=False) from exc
        try:
            replies = self._send(client, queue, priority, options, ids, envs)
        except REDIS_ERRORS as exc:
            # Sent, but no reply read (redis-py reads a pipeline's replies all or
            # none, after resending it on its own retries): some may be in.
            raise self._blast_error(ids, [], exc, sent=True) from exc
        failed = [c for c, reply in enumerate(replies) if isinstance(reply, Exception)]
        if failed:
            written = [
                job_id
                for c in range(len(replies))
                if c not in failed
                for job_id in ids[c * ENQUEUE_CHUNK : (c + 1) * ENQUEUE_CHUNK]
            ]
            raise self._blast_error(ids, written, replies[failed[0]], sent=True) from replies[
                failed[0]
            ]
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
        counters enqueued, processed, failed, retried, stalled, stale_acks.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        keys = self.keys(validate_queue_name(queue))
        with self._producer_call():
            return queue_stats(self.redis, keys)

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
