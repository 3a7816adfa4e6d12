"""The app: configuration, registration, and the producer and operator methods,
which it delegates to the producer and the admins it holds."""

from __future__ import annotations

import functools
import importlib
import logging
from contextlib import AbstractContextManager
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar, Union, cast, overload

import redis

from fastq.admin.jobs import JobAdmin
from fastq.admin.operator import Admin
from fastq.circuit import DEFAULT_FAILURES, DEFAULT_OPEN_S, CircuitKey
from fastq.hooks import Hooks, JobHook
from fastq.job import JobDef
from fastq.keytemplate import KeyTemplate
from fastq.options import JobOptions
from fastq.periodic import PeriodicJob, make_schedule
from fastq.policy import ArgChecker, check_runnable
from fastq.producer.batches import BatchBook
from fastq.producer.chains import ChainBook
from fastq.producer.durable import durability
from fastq.producer.enqueue import DEFAULT_MAX_PAYLOAD_BYTES, Producer
from fastq.producer.testmode import JobRunner, QueuedJobs, test_mode
from fastq.protocol.contracts import ACK
from fastq.protocol.keys import QueueKeys
from fastq.protocol.shards import ShardCounts
from fastq.protocol.store import DEFAULT_CALL_TIMEOUT_S, DEFAULT_REDIS_URL, Store
from fastq.ratelimit import RateKey
from fastq.validate import check_delay_s, check_job_name

if TYPE_CHECKING:
    # App.redis (a property) hides the module's name inside the class
    from redis import Redis as RedisClient
    from typing_extensions import Concatenate, ParamSpec, Unpack

    from fastq.options import JobKeywords

    P = ParamSpec("P")

R = TypeVar("R")
T = TypeVar("T")

__all__ = ["DEFAULT_REDIS_URL", "DEFAULT_UNKNOWN_JOB_GRACE_S", "App"]

# what runs the jobs of a test mode (app.stub(), app.eager()): module, class
TEST_WORKER = ("fastq.testmode", "TestWorker")

# how long a job whose name a worker's app lacks goes back to its queue (a rolling
# deploy's new job, perhaps) before it is broken: fastq.worker.unknown
DEFAULT_UNKNOWN_JOB_GRACE_S = 300.0

log = logging.getLogger("fastq.ack")  # what an ack left to do and could not: App.after_ack


def _delegate(
    part: str, method: Callable[Concatenate[T, P], R]
) -> Callable[Concatenate[Any, P], R]:
    """An App method calling ``method`` by name on its ``part`` (a subclass swapped in answers)."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, getattr(getattr(self, part), method.__name__)(*args, **kwargs))

    return functools.update_wrapper(call, method)


class App:
    """A fastq application: the registry of jobs and the connection to Redis.

    Here: configuration, connections and registration. The other methods are its
    parts': enqueue its :attr:`producer`'s, queues (stats, pause...) its
    :attr:`admin`'s, jobs (inspect, cancel...) its :attr:`job_admin`'s, batches
    and chains its :attr:`batch_book`'s and :attr:`chain_book`'s; all share its :attr:`store`.

    Args:
        redis_url: where Redis is; without it, ``$FASTQ_REDIS_URL``, else
            ``redis://127.0.0.1:6379/0``. A CLI command given ``--app`` uses
            the app's; ``--redis-url`` overrides it.
        namespace: prefix of every key, so several apps can share one Redis: 1 to
            100 ASCII letters, digits, ``_``, ``.``, ``-`` or ``:``.
        dead_max_age_s: dead jobs older than this are deleted.
        dead_max_len: the dead set of a queue keeps at most this many jobs.
        max_stalls: a job whose worker died (or hung) running it more often than
            this is a poison job: it goes dead instead of running again.
        max_payload_bytes: a job larger than this, encoded (its arguments as JSON
            with its name and options), is refused at enqueue with a ValueError
            (default 4 MiB).
        cluster: ``redis_url`` (``redis://`` or ``rediss://``) is one node of a
            Redis Cluster. A ``redis+cluster://host:port[,host:port...]`` URL says
            so itself. Every feature works on a cluster, workers and pools
            included.
        min_replicas: ``enqueue`` and ``enqueue_many`` return only once this many
            replicas have the jobs (Redis ``WAIT``, in the same round trip), and
            raise :class:`fastq.NotReplicated` (the jobs are on the master; retry
            with ``job_ids=exc.ids``) when fewer confirm within
            ``replica_timeout_s``. 0 (the default): do not wait, as Redis
            replicates (asynchronously).
        replica_timeout_s: how long an enqueue waits for the replicas, a finite
            number of seconds in (0, 20].
        unknown_job_grace_s: a job whose name the worker's app does not register
            (a rolling deploy's new job, met by a worker of the old code) goes back
            to its queue with a growing delay, its attempts unchanged, for this
            long (5 minutes by default; workers' ``--unknown-job-grace`` overrides
            it), counted from when a worker first met it; then it is broken. 0:
            broken at once.
        call_timeout_s: how long a call of the app waits for Redis before it gives
            up with ``fastq.RedisUnavailable`` (5 s by default, at least 2; plus
            ``replica_timeout_s`` for an enqueue with ``min_replicas``); a stalled
            Redis costs a call this long once. An enqueue that gives up raises
            ``fastq.EnqueueInterrupted`` naming its ids (retry with them).
    """

    def __init__(
        self,
        redis_url: Optional[str] = None,
        *,
        namespace: str = "fastq",
        dead_max_age_s: float = 7 * 24 * 3600,
        dead_max_len: int = 10_000,
        max_stalls: int = 2,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        cluster: bool = False,
        min_replicas: int = 0,
        replica_timeout_s: float = 1.0,
        unknown_job_grace_s: float = DEFAULT_UNKNOWN_JOB_GRACE_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        wait = durability(min_replicas, replica_timeout_s)
        self.min_replicas = min_replicas
        self.replica_timeout_s = replica_timeout_s
        ok = isinstance(call_timeout_s, (int, float)) and not isinstance(call_timeout_s, bool)
        if not (ok and 2 <= call_timeout_s <= 3600):
            # at least 2 s: a wait for a result blocks in Redis up to 1 s at a time
            raise ValueError(f"call_timeout_s must be within [2, 3600] s, not {call_timeout_s!r}")
        # a WAIT for the replicas is part of an enqueue's call
        timeout_s = float(call_timeout_s) + (wait.timeout_s if wait is not None else 0.0)
        self.store = Store(redis_url, namespace, cluster, timeout_s)
        self.dead_max_age_ms = int(dead_max_age_s * 1000)
        self.dead_max_len = int(dead_max_len)
        if max_stalls < 0:
            raise ValueError(f"max_stalls must be >= 0, not {max_stalls}")
        self.max_stalls = int(max_stalls)
        self.unknown_job_grace_s = check_delay_s(unknown_job_grace_s, "unknown_job_grace_s")
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int):
            raise TypeError(f"max_payload_bytes must be an int, not {max_payload_bytes!r}")
        if max_payload_bytes < 1:
            raise ValueError(f"max_payload_bytes must be >= 1, not {max_payload_bytes}")
        self.registry: dict[str, JobDef[Any]] = {}
        self.schedules: dict[str, PeriodicJob] = {}  # job name -> when it fires
        self.hooks = Hooks()
        self.producer = Producer(self.store, self.registry, max_payload_bytes, wait)
        self.admin = Admin(self.store, self.registry)
        self.job_admin = JobAdmin(self.store, self.admin)
        self.batch_book = BatchBook(self.store, self.producer)
        self.chain_book = ChainBook(lambda: self.producer)

    # -- configuration -------------------------------------------------------------

    @property
    def redis_url(self) -> str:
        return self.store.redis_url

    @property
    def namespace(self) -> str:
        return self.store.namespace

    @property
    def shard_counts(self) -> ShardCounts:
        return self.store.shard_counts

    @property
    def max_payload_bytes(self) -> int:
        return self.producer.max_payload_bytes

    def configure(
        self, *, redis_url: Optional[str] = None, namespace: Optional[str] = None
    ) -> None:
        """Point the app elsewhere (the CLI applies ``--redis-url`` this way)."""
        self.store.configure(redis_url=redis_url, namespace=namespace)
        self.producer.forget_queues()

    def keys(self, queue: str) -> QueueKeys:
        return self.store.keys(queue)

    @property
    def cluster(self) -> bool:
        """Whether Redis is a Redis Cluster (``cluster=True``, or a cluster URL)."""
        return self.store.cluster

    def new_client(
        self,
        *,
        retries: int = 2,
        socket_timeout_s: Optional[float] = 30.0,
        connect_timeout_s: float = 5.0,
    ) -> redis.Redis:
        """A fresh client (:func:`fastq.connection.client.new_client`). Workers pass
        ``retries=0``: they must see every connection error to know that a reply may
        have been lost."""
        return self.store.new_client(
            retries=retries, socket_timeout_s=socket_timeout_s, connect_timeout_s=connect_timeout_s
        )

    @property
    def redis(self) -> redis.Redis:
        """The producer's client; a new one after fork, never a shared socket."""
        return self.store.redis

    def close(self) -> None:
        self.store.close()

    def stub(self) -> AbstractContextManager[QueuedJobs]:
        """For a test: inside ``with app.stub() as jobs:``, enqueues are checked and
        encoded as always but kept in ``jobs`` instead of Redis (no Redis needed);
        ``jobs.run()`` runs them here, as a worker runs them: ``current_job()``,
        hooks, retries (their backoff not slept), results and progress
        (:mod:`fastq.producer.testmode`)."""
        return test_mode(self, eager=False, worker=self._test_worker)

    def eager(self) -> AbstractContextManager[QueuedJobs]:
        """For a test: inside ``with app.eager():``, each job enqueued runs at once,
        in-process, from its encoded envelope, as a worker runs it (retried at once
        by its policy); the exception of a job that failed for good propagates to
        the enqueue call (:mod:`fastq.producer.testmode`)."""
        return test_mode(self, eager=True, worker=self._test_worker)

    def _test_worker(self) -> JobRunner:
        """What runs a test mode's jobs: a worker's runner, in-process."""
        # It ranks with the runners, above the app: named here and loaded when a
        # test mode starts (as Celery's app names its worker class), so that the
        # layers still import one way and `import fastq` loads no runner
        worker: JobRunner = getattr(importlib.import_module(TEST_WORKER[0]), TEST_WORKER[1])(
            self.registry, self.hooks
        )
        return worker

    def on_worker_start(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Register ``fn`` to run in every worker process once it starts (after
        the fork, in a pool): open per-process resources there. If it raises,
        the worker does not start (a pool stops rather than crash-loop)."""
        self.hooks.worker_start.append(fn)
        return fn

    def on_worker_stop(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Register ``fn`` to run in every worker process as it stops, after its
        last outcomes are sent (flush a tracer's spans there). Run in the reverse
        order of registration; one that raises is logged."""
        self.hooks.worker_stop.append(fn)
        return fn

    def before_job(self, fn: JobHook) -> JobHook:
        """Register ``fn(event)`` to run in the worker before each job, in the job's
        context (:class:`fastq.hooks.JobEvent`: ``name``, ``job_id``, ``queue``,
        ``args``, ``kwargs``, ``attempt``). One that raises is logged; the job runs."""
        self.hooks.before_job.append(fn)
        return fn

    def after_job(self, fn: JobHook) -> JobHook:
        """Register ``fn(event)`` to run after each job, whatever became of it:
        ``event.outcome`` is ``"done"``, ``"retried"``, ``"dead"``, ``"broken"`` or
        ``"stalled"``, ``event.exc`` what it raised (or None), ``event.duration_s``
        how long it ran. ``after_job`` hooks run in the reverse order of
        registration; one that raises is logged and changes no outcome."""
        self.hooks.after_job.append(fn)
        return fn

    def on_failure(self, fn: JobHook) -> JobHook:
        """Register ``fn(event)`` to run after each job that did not succeed
        (before the ``after_job`` hooks; the event as theirs)."""
        self.hooks.on_failure.append(fn)
        return fn

    # -- registration ----------------------------------------------------------------

    @overload
    def job(self, fn: Callable[..., R]) -> JobDef[R]: ...

    @overload
    def job(
        self, fn: None = None, **options: Unpack[JobKeywords]
    ) -> Callable[[Callable[..., R]], JobDef[R]]: ...

    def job(
        self, fn: Optional[Callable[..., R]] = None, **options: Unpack[JobKeywords]
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
                or above ``fastq.validate.MAX_RESULT_BYTES``) fails the run with
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
                attempt (see :mod:`fastq.ratelimit`).
            unique_for_s: its jobs are unique for this many seconds: an enqueue
                while a job of the same key (a hash of the name and arguments, or
                ``unique_key=``) holds the lock adds nothing and returns that
                job's id. Periodic runs and retries are not checked.
            unique_until: when the lock ends before its window does: ``"end"``
                (the job completes, dies, is cancelled or purged), ``"start"``
                (it starts: one copy may wait while one runs) or ``"window"``
                (never early).
            shards: spread ``queue`` over this many shards (1 to 64), each a queue
                of its own in Redis with its own hash tag, so that one hot queue
                uses several Redis Cluster nodes; it is still served, counted,
                paused and searched as one queue (see :mod:`fastq.protocol.shards`). Said
                of the queue, once: the other jobs of the queue may leave it out.
            group: the group of its jobs, a format string of the job's parameters
                (``"{tenant_id}"``) formatted at enqueue (an enqueue's ``group=``
                overrides it): a queue holding grouped jobs is claimed round-robin
                across its groups (docs/groups.md).
            circuit_key, circuit_failures, circuit_open_s: a circuit breaker: after
                ``circuit_failures`` (20) failures in a row of the jobs whose
                ``circuit_key``, a format string of the job's parameters
                (``"smtp:{host}"``), gives the same key, none of them starts for
                ``circuit_open_s`` (5 s), on any worker; then one probes (see
                :mod:`fastq.circuit`).

        Raises:
            TypeError: ``fn`` is not a callable a worker can run: not callable,
                an async generator or a generator function (``async def``
                functions are run on the worker's event loop); or it has no ``__name__`` and
                no ``name`` was given; ``delivery`` is not a string.
            ValueError: another function is already registered under that name, an
                option is out of range (``result_ttl_s`` not a finite number in
                (0, 30 days], ``delivery`` not one of the two), a retry option
                (``retry``, ``backoff_s``, ``retry_delays_s``, ``age_limit_s``...)
                given to an at-most-once job, options of two retry policies given
                together (``retry=`` with ``backoff_s``, ``retry_delays_s`` with
                ``backoff_s``, ...), ``rate_key`` without ``rate`` or the other
                way round, a ``rate_key`` or ``group`` field that is not a
                parameter's ``{name}``,
                or a bad ``rate``/``per_s``/``burst`` (as :meth:`set_rate_limit`);
                ``shards`` not an int within 1..64, or another count than the
                queue was declared with.
        """
        spec = JobOptions.of(options, "job")
        self.shard_counts.check(spec.queue, spec.shards)

        def register(func: Callable[..., R]) -> JobDef[R]:
            job_name = spec.name or getattr(func, "__name__", None)
            if not isinstance(job_name, str) or not job_name:
                raise TypeError(f"cannot register {func!r} as a job: give it a name=")
            check_job_name(job_name)
            check_runnable(func, job_name)
            existing = self.registry.get(job_name)
            if existing is not None and existing.fn is not func:
                raise ValueError(f"a job named {job_name!r} is already registered: {existing.fn!r}")
            key = None
            if spec.rate_key is not None and spec.key_limit is not None:
                key = RateKey(func, spec.rate_key, spec.key_limit)
            group = None if spec.group is None else KeyTemplate(func, spec.group, "group")
            circuit = None
            if spec.circuit_key is not None:
                circuit = CircuitKey(
                    func,
                    spec.circuit_key,
                    DEFAULT_FAILURES if spec.circuit_failures is None else spec.circuit_failures,
                    DEFAULT_OPEN_S if spec.circuit_open_s is None else spec.circuit_open_s,
                )
            jobdef = JobDef(
                self,
                func,
                job_name,
                spec.queue,
                spec.priority,
                spec.policy,
                spec.result_ttl_s,
                spec.mode,
                rate_key=key,
                unique_for_s=spec.unique_for_s,
                unique_until=spec.unique_until,
                group=group,
                circuit=circuit,
            )
            self.registry[job_name] = jobdef
            self.shard_counts.declare(spec.queue, spec.shards)
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
        **job_options: Unpack[JobKeywords],
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
            envelopes, name = self.producer.envelopes, str(job_name)
            envelopes.encode(name, list(args), run_kwargs, envelopes.tail(name, priority=0))
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

    def job_queues(self) -> list[str]:
        """The queues this app registers jobs on, periodic ones included, in the order
        registered (``["default"]`` when none): what a worker or a pool serves when
        started without ``-q``."""
        return list(dict.fromkeys(job.queue for job in self.registry.values())) or ["default"]

    def after_ack(self, client: RedisClient, queue: str, ack_reply: Any, who: str) -> None:
        """Do now what an ack of ``queue`` (``ack_reply``: its raw reply) left to do,
        whoever sent it (a pool child, the master for a dead child, an HTTP worker):
        settle the batches whose share of the queue it ended, and enqueue the next
        links of the chains it moved on. A Redis error leaves either due in Redis for
        a reaper, and is logged (as ``who``), not raised: the ack itself went through.
        """
        batch_ids, link_ids = ACK.batches_ended(ack_reply), ACK.chains_moved(ack_reply)
        if batch_ids:
            try:
                self.batch_book.settle_shares(client, queue, batch_ids)
            except redis.RedisError as exc:
                log.warning(
                    "%s: batches %s of %s not settled (%s); a reaper will",
                    who,
                    ", ".join(batch_ids),
                    queue,
                    exc,
                )
        if link_ids:
            try:
                self.chain_book.forward(client, queue, link_ids)
            except redis.RedisError as exc:
                log.warning(
                    "%s: %d links of chains on %s not forwarded (%s); a reaper will",
                    who,
                    len(link_ids),
                    queue,
                    exc,
                )

    # -- the producer's and the admin's methods ---------------------------------------

    enqueue = _delegate("producer", Producer.enqueue)
    enqueue_many = _delegate("producer", Producer.enqueue_many)
    submit = _delegate("producer", Producer.submit)
    submit_many = _delegate("producer", Producer.submit_many)
    declare_queue = _delegate("producer", Producer.declare_queue)

    stats = _delegate("admin", Admin.stats)
    stats_on = _delegate("admin", Admin.stats_on)
    pause = _delegate("admin", Admin.pause)
    resume = _delegate("admin", Admin.resume)
    set_rate_limit = _delegate("admin", Admin.set_rate_limit)
    rate_limit = _delegate("admin", Admin.rate_limit)
    set_key_rate_limit = _delegate("admin", Admin.set_key_rate_limit)
    key_rate_limits = _delegate("admin", Admin.key_rate_limits)
    circuits = _delegate("admin", Admin.circuits)
    groups = _delegate("admin", Admin.groups)
    pause_group = _delegate("admin", Admin.pause_group)
    resume_group = _delegate("admin", Admin.resume_group)
    paused_groups = _delegate("admin", Admin.paused_groups)
    keep_records = _delegate("admin", Admin.keep_records)
    purge = _delegate("admin", Admin.purge)
    queues = _delegate("admin", Admin.queues)
    queues_on = _delegate("admin", Admin.queues_on)
    shards = _delegate("admin", Admin.shards)
    physical_queues = _delegate("admin", Admin.physical_queues)
    physical_queues_on = _delegate("admin", Admin.physical_queues_on)
    workers = _delegate("admin", Admin.workers)
    history = _delegate("admin", Admin.history)
    get_job = _delegate("job_admin", JobAdmin.get_job)
    recent_jobs = _delegate("job_admin", JobAdmin.recent_jobs)
    holders = _delegate("job_admin", JobAdmin.holders)
    dead_jobs = _delegate("job_admin", JobAdmin.dead_jobs)
    broken_jobs = _delegate("job_admin", JobAdmin.broken_jobs)
    retry_dead = _delegate("job_admin", JobAdmin.retry_dead)
    retry_job = _delegate("job_admin", JobAdmin.retry_job)
    delete_job = _delegate("job_admin", JobAdmin.delete_job)
    waiting_jobs = _delegate("job_admin", JobAdmin.waiting_jobs)
    retry_broken = _delegate("job_admin", JobAdmin.retry_broken)
    cancel = _delegate("job_admin", JobAdmin.cancel)
    cancel_by_tag = _delegate("job_admin", JobAdmin.cancel_by_tag)
    jobs_by_tag = _delegate("job_admin", JobAdmin.jobs_by_tag)
    result = _delegate("job_admin", JobAdmin.result)
    batch = _delegate("batch_book", BatchBook.batch)
    batch_status = _delegate("batch_book", BatchBook.batch_status)
    list_batches = _delegate("batch_book", BatchBook.list_batches)
    close_batch = _delegate("batch_book", BatchBook.close_batch)
    cancel_batch = _delegate("batch_book", BatchBook.cancel_batch)
    chain = _delegate("chain_book", ChainBook.chain)
    chain_status = _delegate("chain_book", ChainBook.chain_status)
