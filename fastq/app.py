"""The producer API: an App registers jobs and enqueues them."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar, Union, overload

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry as RedisRetry

from fastq import scripts
from fastq._accel import codec
from fastq._version import __version__
from fastq.contracts import ENQUEUE
from fastq.errors import RedisUnavailable
from fastq.introspect import JobInfo, get_job, queue_stats
from fastq.job import ArgChecker, IdGenerator, JobDef, JobPolicy
from fastq.keys import QueueKeys, validate_queue_name

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
# One enqueue script call carries at most this many jobs (Lua's unpack limit is ~8000 values).
ENQUEUE_CHUNK = 1000
MAX_PRIORITY = 2**20


def _check_priority(priority: object) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be within ±{MAX_PRIORITY}, not {priority}")
    return priority


def _check_url(url: str) -> str:
    try:
        redis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise ValueError(f"invalid Redis URL {url!r}: {exc}") from None
    return url


def _delay_ms(delay_s: object) -> int:
    if not isinstance(delay_s, (int, float)) or isinstance(delay_s, bool) or delay_s < 0:
        raise ValueError(f"delay_s must be a number >= 0, not {delay_s!r}")
    return int(delay_s * 1000)


class App:
    """A fastq application: the registry of jobs and the connection to Redis.

    Args:
        redis_url: where Redis is; ``FASTQ_REDIS_URL`` or ``--redis-url`` given to
            the CLI override it.
        namespace: prefix of every key, so several apps can share one Redis.
        dead_max_age_s: dead jobs older than this are deleted.
        dead_max_len: the dead set of a queue keeps at most this many jobs.
        max_stalls: a job whose worker died (or hung) running it more often than
            this is a poison job: it goes dead instead of running again.
    """

    def __init__(
        self,
        redis_url: str = DEFAULT_REDIS_URL,
        *,
        namespace: str = "fastq",
        dead_max_age_s: float = 7 * 24 * 3600,
        dead_max_len: int = 10_000,
        max_stalls: int = 2,
    ) -> None:
        if not namespace or any(c in namespace for c in "{}"):
            raise ValueError(f"invalid namespace {namespace!r}")
        self.redis_url = _check_url(redis_url)
        self.namespace = namespace
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
            if any(c in namespace for c in "{}") or not namespace:
                raise ValueError(f"invalid namespace {namespace!r}")
            self.namespace = namespace
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
            try:
                scripts.load_all(client)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise RedisUnavailable(f"cannot reach Redis at {self.redis_url}: {exc}") from exc
            self._client = client
            self._client_pid = os.getpid()
        return self._client

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
            ValueError: another function is already registered under that name, or
                an option is out of range.
        """
        validate_queue_name(queue)
        _check_priority(priority)
        policy = JobPolicy(
            retries=retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            jitter=jitter,
            retry_on=tuple(retry_on),
            timeout_s=timeout_s,
        )

        def register(func: Callable[..., R]) -> JobDef[R]:
            job_name = name or func.__name__
            existing = self.registry.get(job_name)
            if existing is not None and existing.fn is not func:
                raise ValueError(f"a job named {job_name!r} is already registered: {existing.fn!r}")
            jobdef = JobDef(self, func, job_name, queue, priority, policy)
            self.registry[job_name] = jobdef
            return jobdef

        return register(fn) if fn is not None else register

    # -- enqueue -------------------------------------------------------------------

    def _route(self, name: str, queue: Optional[str], priority: Optional[int]) -> tuple[str, int]:
        if not isinstance(name, str) or not name:
            raise TypeError(f"job name must be a non-empty str, not {name!r}")
        jobdef = self.registry.get(name)
        if queue is None:
            queue = jobdef.queue if jobdef else "default"
        validate_queue_name(queue)
        if priority is None:
            priority = jobdef.priority if jobdef else 0
        return queue, _check_priority(priority)

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

    def _send(
        self, queue: str, priority: int, delay_ms: int, ids: Sequence[str], envs: Sequence[bytes]
    ) -> None:
        keys = ENQUEUE.keys_for(self.keys(queue))
        commands = []
        for lo in range(0, len(ids), ENQUEUE_CHUNK):
            hi = lo + ENQUEUE_CHUNK
            argv = ENQUEUE.argv(priority, delay_ms, ids[lo:hi], envs[lo:hi])
            commands.append(ENQUEUE.command(keys, argv))
        try:
            scripts.call_many(self.redis, commands)
            if queue not in self._known_queues:
                self.redis.sadd(f"{self.namespace}:queues", queue)
                self._known_queues.add(queue)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(f"cannot reach Redis at {self.redis_url}: {exc}") from exc

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
    ) -> str:
        """Enqueue one job by its registered name; returns the job id.

        A job name this app does not know is accepted (another service may run it)
        and sent to ``queue`` or ``"default"``. A ``job_id`` makes the call
        idempotent: while a job with that id exists, enqueueing it again does
        nothing.

        Raises:
            TypeError: args do not fit the registered function, or are not
                JSON-serializable; nothing is sent.
            ValueError: bad queue name, priority or delay.
            fastq.RedisUnavailable: Redis could not be reached.
        """
        queue, priority = self._route(name, queue, priority)
        delay_ms = _delay_ms(delay_s)
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
        jobdef = self.registry.get(name)
        if jobdef is not None:
            jobdef.arg_checker.check(args, kwargs)
        if job_id is None:
            job_id = self._ids.next_ids(1)[0]
        elif not isinstance(job_id, str) or not job_id:
            raise TypeError(f"job_id must be a non-empty str, not {job_id!r}")
        env = codec.encode_envelope(job_id, args, kwargs, self._tail(name, queue, priority))
        self._send(queue, priority, delay_ms, [job_id], [env])
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
    ) -> list[str]:
        """Enqueue many calls of one job in pipelined batches; returns their ids.

        Each call is a tuple/list of positional arguments or a dict of keyword
        arguments. All calls are checked and encoded before anything is sent.

        Raises:
            TypeError: a call does not fit the function or is not JSON-serializable
                (the message names its index); nothing is sent.
            ValueError: ``job_ids`` has the wrong length or repeats an id.
            fastq.RedisUnavailable: Redis could not be reached.
        """
        queue, priority = self._route(name, queue, priority)
        delay_ms = _delay_ms(delay_s)
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
            if len(set(ids)) != len(ids):
                raise ValueError("job_ids repeat an id")
            if not all(isinstance(i, str) and i for i in ids):
                raise TypeError("job_ids must be non-empty strings")
        envs = codec.encode_calls(ids, calls, self._tail(name, queue, priority))
        self._send(queue, priority, delay_ms, ids, envs)
        return ids

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
        counters enqueued, processed, failed, retried, stalled, stale_acks."""
        try:
            return queue_stats(self.redis, self.keys(validate_queue_name(queue)))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(f"cannot reach Redis at {self.redis_url}: {exc}") from exc

    def queues(self) -> list[str]:
        """Every queue this namespace has seen an enqueue for, or has registered."""
        members = self.redis.smembers(f"{self.namespace}:queues")
        seen = {q.decode() if isinstance(q, bytes) else str(q) for q in members}
        return sorted(seen | {j.queue for j in self.registry.values()})

    def get_job(self, job_id: str, queue: Optional[str] = None) -> Optional[JobInfo]:
        """What fastq knows of a job: state, attempts, last error, timestamps.

        Returns None for an unknown id, and for a job that completed (completed
        jobs are deleted). Without ``queue``, every known queue is searched.
        """
        candidates = [validate_queue_name(queue)] if queue else self.queues()
        try:
            for q in candidates:
                info = get_job(self.redis, self.keys(q), job_id)
                if info is not None:
                    return info
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(f"cannot reach Redis at {self.redis_url}: {exc}") from exc
        return None
