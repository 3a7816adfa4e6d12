"""The enqueue path of an app: route, encode, and send jobs in chunked script calls."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from fastq._accel import codec
from fastq.connection.faults import REDIS_ERRORS, Fault, classify
from fastq.connection.url import mask_url
from fastq.errors import (
    BatchClosed,
    EnqueueError,
    EnqueueInterrupted,
    FastqError,
    RedisUnavailable,
    ShardCountMismatch,
    UnknownQueue,
)
from fastq.job import JobDef
from fastq.options import EnqueueOptions
from fastq.policy import ArgChecker
from fastq.producer import durable
from fastq.producer.durable import Durability
from fastq.producer.envelope import Envelopes
from fastq.producer.ids import IdGenerator
from fastq.producer.routing import chunk_size, pick, plan_calls
from fastq.producer.transport import RedisTransport, Transport
from fastq.producer.unique import UniquePlan, call_unique_key, default_unique_key, unique_plan
from fastq.protocol.keys import validate_queue_name
from fastq.protocol.store import Store
from fastq.validate import check_job_id

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fastq.options import EnqueueKeywords, EnqueueManyKeywords

# A job's envelope (its arguments as JSON, with its name and options) at most, by
# default: Redis holds every job whole in memory and a worker reads a batch of them
# in one reply; big data belongs in a store, with its key in the job.
DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024

# What the first connection of an enqueue_many may raise: mapped already, or raw.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (FastqError, *REDIS_ERRORS)


@dataclass(frozen=True)
class Prepared:
    """Jobs of one name and options, checked, given ids and encoded, not sent yet:
    what one :meth:`Producer.send` sends. ``ids_given``: the caller named the ids (a
    sharded queue routes each by its id). ``one``: a single enqueue's, whose errors
    say ``job_id=exc.ids[0]``, rather than a blast's."""

    name: str
    queue: str
    priority: int
    options: EnqueueOptions
    ids: list[str]
    envs: list[bytes]
    unique: Optional[UniquePlan]
    unique_keys: list[str]
    ids_given: bool
    one: bool = True

    @classmethod
    def joined(cls, jobs: Sequence[Prepared]) -> Prepared:
        """Single jobs of one name and the same options (their ids named for all or
        none) as one blast, sent in as few script calls as ``enqueue_many``'s."""
        if len(jobs) == 1:
            return jobs[0]
        first = jobs[0]
        return dataclasses.replace(
            first,
            options=dataclasses.replace(first.options, job_id=None),
            ids=[i for job in jobs for i in job.ids],
            envs=[env for job in jobs for env in job.envs],
            unique_keys=[key for job in jobs for key in job.unique_keys],
            one=False,
        )


class Producer:
    """The enqueue path of an app: ``enqueue``, ``enqueue_many`` and the ``submit``
    calls a ``JobDef`` enqueues through (``fastq.App`` delegates to it).

    Args:
        store: the app's Redis and namespace.
        registry: the app's jobs by name (read as they are registered).
        max_payload_bytes: the largest envelope an enqueue takes.
        durability: ``App(min_replicas=...)``'s wait for replicas; None: off.
        transport: where the jobs go (:mod:`fastq.producer.transport`); None:
            Redis, through ``store``.
    """

    def __init__(
        self,
        store: Store,
        registry: Mapping[str, JobDef[Any]],
        max_payload_bytes: int,
        durability: Optional[Durability],
        transport: Optional[Transport] = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.envelopes = Envelopes(registry, max_payload_bytes)
        self._durability = durability
        self._ids = IdGenerator()
        self.transport: Transport = (
            transport if transport is not None else RedisTransport(store, registry, durability)
        )

    def forget_queues(self) -> None:
        """Forget which queues Redis knows (the app now points elsewhere)."""
        self.transport.forget_queues()

    @property
    def max_payload_bytes(self) -> int:
        return self.envelopes.max_payload_bytes

    def new_ids(self, n: int) -> list[str]:
        """``n`` fresh job ids, unique across hosts and in the order made."""
        return self._ids.next_ids(n)

    def declare_queue(self, *queues: str, shards: Optional[int] = None) -> None:
        """Let this app enqueue on ``queues`` although no job of it is registered
        there and Redis does not know them yet: a new queue, on purpose. With
        ``shards``, each is a sharded queue of that many shards (as ``@app.job(...,
        shards=K)`` says), written to Redis at once, before any job can be routed
        (every producer, of any language, then routes an id to one shard).

        Without it an enqueue on such a queue raises ``UnknownQueue`` in an app that
        registers jobs (a typo in a queue name would otherwise hold jobs that no
        worker serves), and logs a warning, once, in an app that registers none (a
        producer cannot tell a typo from a queue whose workers have not started).
        A queue is known once a job of this app is registered on it, it is
        declared, or the namespace knows it (something was enqueued on it, or a
        worker whose app registers jobs there started). ``"default"`` always is.
        A declared queue is made known to the namespace at once, so every process
        of it (a ``fastq serve``'s HTTP door, another app) knows it from then on.

        Raises:
            TypeError, ValueError: an invalid queue name, a bad ``shards``, or
                another count than the queue was declared with.
            fastq.ShardCountMismatch: Redis holds another count (enqueues raise too).
            fastq.RedisUnavailable, fastq.RedisRefused: the queue could not be
                made known to the namespace, or its count written (the first
                enqueue or worker writes them).
        """
        for queue in queues:
            validate_queue_name(queue)
            self.store.shard_counts.check(queue, shards)
        for queue in queues:
            self.store.shard_counts.declare(queue, shards)
        self.transport.declare(queues, shards)

    def enqueue(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Optional[dict[str, Any]] = None,
        **options: Unpack[EnqueueKeywords],
    ) -> str:
        """Enqueue one job by its registered name; returns the job id (for a unique
        job refused because its key's lock is held: the id of the job holding it).

        A job name this app does not know is accepted (another service may run it)
        and sent to ``queue`` or ``"default"``. A ``job_id`` makes the call
        idempotent: while a job with that id exists, enqueueing it again does
        nothing. Options as in :meth:`fastq.JobDef.enqueue_with`.

        On a sharded queue the job goes to the shard of its ``shard_key``, its
        unique key or the ``job_id`` given (the same shard every time), else to
        the next shard in turn.

        Raises:
            TypeError: args do not fit the registered function,, or hold what
                JSON cannot carry as it is (a datetime, a UUID, a Decimal, a set, NaN:
                see docs/enqueueing.md; the message says where); nothing is sent.
            ValueError: bad queue name, job id, priority, delay or ``at`` (a naive
                datetime included), or the job is larger than the app's
                ``max_payload_bytes``; nothing is sent.
            TypeError: ``delay_s`` and ``at`` both given; nothing is sent.
            fastq.EnqueueInterrupted: Redis could not be reached, or did not answer
                within the app's ``call_timeout_s`` (a stall): the job may have gone
                in; retry with ``job_id=exc.ids[0]`` (idempotent). A
                ``fastq.RedisUnavailable`` too.
            fastq.RedisRefused: Redis refused the write (out of memory, ACL).
            fastq.NotReplicated: with ``App(min_replicas=n)``, fewer than n
                replicas confirmed the job within ``replica_timeout_s``; it is on
                the master: retry with ``job_id=exc.ids[0]``.
        """
        return self.submit(name, args, kwargs, EnqueueOptions.of(options, "enqueue"))

    def submit(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]],
        options: EnqueueOptions,
    ) -> str:
        """:meth:`enqueue` with its options made (``JobDef`` enqueues through this)."""
        return self.send(self.prepare(name, args, kwargs, options))[0]

    def prepare(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Optional[dict[str, Any]],
        options: EnqueueOptions,
    ) -> Prepared:
        """One job checked, given its id and encoded, as :meth:`enqueue` does before
        it sends anything: :meth:`send` sends it (the HTTP door checks every job of a
        request so before it sends the first). Raises as :meth:`enqueue` does for
        bad input."""
        queue, priority = self.envelopes.route(name, options)
        if not isinstance(args, (list, tuple)):
            raise TypeError(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
        jobdef = self.registry.get(name)
        if jobdef is not None:
            jobdef.arg_checker.check(args, kwargs)
        unique = unique_plan(options, jobdef)
        job_id = options.job_id if options.job_id is not None else self.new_ids(1)[0]
        group = self.envelopes.group_of(name, options, args, kwargs)
        tail = self.envelopes.tail(name, priority, options, group=group)
        env = self.envelopes.encode(name, args, kwargs, tail)
        ukeys = []
        if unique is not None:
            ukeys.append(unique.key or default_unique_key(name, args, kwargs))
        given = options.job_id is not None
        return Prepared(name, queue, priority, options, [job_id], [env], unique, ukeys, given)

    def send(self, jobs: Prepared) -> list[str]:
        """Send prepared jobs (:meth:`prepare`, :meth:`prepare_many`); their ids (a
        unique job refused by a held lock: the holder's). Raises as :meth:`enqueue`
        (one job) or :meth:`enqueue_many` (a blast) does once input is checked."""
        return self._send_one(jobs) if jobs.one else self._send_many(jobs)

    def _send_one(self, job: Prepared) -> list[str]:
        job_id = job.ids[0]
        try:
            with self.store.producer_call():
                shards = self.transport.open(job.queue)
                route = job.unique_keys if job.unique is not None else None
                if route is None and job.ids_given:
                    route = [job_id]
                parts = plan_calls(
                    self.store.shard_counts, job.queue, shards, 1, 1, job.options, route
                )
                replies, confirmed = self.transport.send(
                    parts, job.priority, job.options, job.ids, job.envs, job.unique, job.unique_keys
                )
                if isinstance(replies[0], Exception):
                    raise replies[0]
        except RedisUnavailable as exc:  # a stall, a lost link: it may have gone in
            cause = exc.__cause__ or exc
            again = "job_id=exc.ids[0]"  # its id makes the retry idempotent
            raise blast_error(
                self.store.redis_url, [job_id], [], cause, sent=True, again=again
            ) from cause
        durable.check_replicated(
            self._durability, [job_id], confirmed, "job_id=exc.ids[0]", self.store.redis_url
        )
        # a unique job refused by a held lock: the id of the job holding it
        holder: str = replies[0].holders.get(0, job_id)
        return [holder]

    def enqueue_many(
        self,
        name: str,
        calls: Iterable[Any],
        *,
        job_ids: Optional[Sequence[str]] = None,
        **options: Unpack[EnqueueManyKeywords],
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
        idempotent: ids already in Redis are left alone, and so are those whose
        jobs ran meanwhile, while their records last (``App.keep_records``)::

            try:
                ids = app.enqueue_many("send_email", calls)
            except fastq.EnqueueError as exc:
                ...  # once Redis has room (or is back)
                ids = app.enqueue_many("send_email", calls, job_ids=exc.ids)

        On a sharded queue, fresh ids are spread evenly over the shards (each
        shard a contiguous share, starting at the next shard in turn); ids given
        (``job_ids``) and unique jobs each to their own key's shard, so that a
        retry finds them; all to ``shard_key``'s shard when it is given.

        Raises:
            TypeError: a call does not fit the function or holds what JSON cannot
                carry as it is (a datetime, a UUID, NaN...; the message names the
                call's index and where in it);
                nothing is sent.
            ValueError: ``job_ids`` has the wrong length, repeats an id, or holds an
                invalid one; a bad queue name, priority, delay or ``at``; a call
                larger than the app's ``max_payload_bytes`` (the message names its
                index); nothing is sent. (``TypeError`` for ``delay_s`` and ``at`` both given.)
            fastq.EnqueueError: Redis refused some or all chunks (out of memory, an
                ACL); ``written`` went in, ``not_written`` did not.
            fastq.EnqueueInterrupted: Redis could not be reached, or the connection
                was lost mid-blast: ``written`` went in, ``not_written`` may have.
                An ``EnqueueError`` and a ``fastq.RedisUnavailable`` both.
            fastq.NotReplicated: with ``App(min_replicas=n)``, fewer than n
                replicas confirmed the jobs within ``replica_timeout_s``; every
                one is on the master (an ``EnqueueError``: retry the same way).
        """
        made = EnqueueOptions.of(options, "enqueue_many")
        return self.submit_many(name, calls, made, job_ids)

    def submit_many(
        self,
        name: str,
        calls: Iterable[Any],
        options: EnqueueOptions,
        job_ids: Optional[Sequence[str]] = None,
    ) -> list[str]:
        """:meth:`enqueue_many` with its options made (``JobDef`` enqueues through this)."""
        return self.send(self.prepare_many(name, calls, options, job_ids))

    def prepare_many(
        self,
        name: str,
        calls: Iterable[Any],
        options: EnqueueOptions,
        job_ids: Optional[Sequence[str]] = None,
    ) -> Prepared:
        """Many calls of one job checked, given ids and encoded, as
        :meth:`enqueue_many` does before it sends anything (:meth:`send` sends them).
        Raises as :meth:`enqueue_many` does for bad input."""
        if options.job_id is not None:
            raise TypeError("enqueue_many takes job_ids=[...], one per call, not job_id")
        queue, priority = self.envelopes.route(name, options)
        calls = calls if isinstance(calls, list) else list(calls)
        jobdef = self.registry.get(name)
        if jobdef is not None:
            self._check_calls(jobdef.arg_checker, calls)
        unique = unique_plan(options, jobdef)
        if job_ids is None:
            ids = self.new_ids(len(calls))
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
        if options.group is None and jobdef is not None and jobdef.group is not None:
            envs = self._encode_grouped(name, priority, options, calls)
        else:
            tail = self.envelopes.tail(name, priority, options, group=options.group)
            envs = self.envelopes.encode_calls(name, calls, tail)
        ukeys: list[str] = []
        if unique is not None:
            ukeys = [unique.key or call_unique_key(name, call) for call in calls]
        return Prepared(
            name, queue, priority, options, ids, envs, unique, ukeys, job_ids is not None, False
        )

    def _send_many(self, jobs: Prepared) -> list[str]:
        ids = jobs.ids
        if not ids:
            return ids
        try:
            shards = self.transport.open(jobs.queue)
        except (UnknownQueue, ShardCountMismatch):
            raise  # bad input, not a failed blast: nothing was sent
        except _CONNECT_ERRORS as exc:
            raise blast_error(self.store.redis_url, ids, [], exc, sent=False) from exc
        unique, ukeys = jobs.unique, jobs.unique_keys
        route = ukeys if unique is not None else (ids if jobs.ids_given else None)
        parts = plan_calls(
            self.store.shard_counts,
            jobs.queue,
            shards,
            len(ids),
            chunk_size(jobs.options, unique),
            jobs.options,
            route,
        )
        try:
            replies, confirmed = self.transport.send(
                parts, jobs.priority, jobs.options, ids, jobs.envs, unique, ukeys
            )
        except REDIS_ERRORS as exc:
            # Sent, but no reply read (redis-py reads a pipeline's replies all or
            # none, after resending it on its own retries): some may be in.
            raise blast_error(self.store.redis_url, ids, [], exc, sent=True) from exc
        failed = [c for c, reply in enumerate(replies) if isinstance(reply, Exception)]
        if len(failed) == len(replies) and isinstance(replies[0], BatchClosed):
            raise replies[0]  # nothing went in: as a refused join
        if failed:
            written = [
                job_id
                for (_, at), reply in zip(parts, replies)
                if not isinstance(reply, Exception)
                for job_id in pick(ids, at)
            ]
            raise blast_error(
                self.store.redis_url, ids, written, replies[failed[0]], sent=True
            ) from replies[failed[0]]
        durable.check_replicated(
            self._durability, ids, confirmed, "job_ids=exc.ids", self.store.redis_url
        )
        if unique is not None:
            # each unique job refused by a held lock: the id of the job holding it
            ids = list(ids)
            for (_, at), reply in zip(parts, replies):
                for i, holder in reply.holders.items():
                    ids[at[i]] = holder
        return ids

    def _encode_grouped(
        self, name: str, priority: int, options: EnqueueOptions, calls: list[Any]
    ) -> list[bytes]:
        """The envelopes of calls of a job whose group is formatted from each call's
        arguments: encoded a group at a time, one tail each, in the calls' order."""
        by_group: dict[Optional[str], list[int]] = {}
        for i, call in enumerate(calls):
            args, kwargs = ((), call) if isinstance(call, dict) else (call, None)
            try:
                group = self.envelopes.group_of(name, options, args, kwargs)
            except ValueError as exc:
                raise ValueError(f"call {i}: {exc}") from None
            by_group.setdefault(group, []).append(i)
        envs: list[bytes] = [b""] * len(calls)
        now_ms = int(time.time() * 1000)
        for group, at in by_group.items():
            tail = self.envelopes.tail(name, priority, options, now_ms, group)
            try:
                encoded = self.envelopes.encode_calls(name, [calls[i] for i in at], tail)
            except (TypeError, ValueError) as exc:
                # the message names the call by its index in the group's: say its own
                raise type(exc)(f"{exc} (call {at[0]} and on, of group {group!r})") from None
            for i, env in zip(at, encoded):
                envs[i] = env
        return envs

    @staticmethod
    def _check_calls(checker: ArgChecker, calls: list[Any]) -> None:
        # calls of a count of positional arguments the function takes fit without a
        # bind: skipped by one native pass; only the others are checked one by one
        low, high = checker.counts or (-1, -1)
        i = codec.first_misfit(calls, low, high, 0)
        while i < len(calls):
            call = calls[i]
            try:
                if isinstance(call, (tuple, list)):
                    checker.check(call, None)
                elif isinstance(call, dict):
                    checker.check((), call)
            except TypeError as exc:
                raise TypeError(f"call {i}: {exc}") from None
            i = codec.first_misfit(calls, low, high, i + 1)


def blast_error(
    redis_url: str,
    ids: list[str],
    written: list[str],
    cause: BaseException,
    *,
    sent: bool,
    again: str = "job_ids=exc.ids",
) -> EnqueueError:
    """The EnqueueError of a blast that Redis took only part of (or none);
    ``again``: the retry's argument the message names."""
    done = set(written)
    not_written = [job_id for job_id in ids if job_id not in done]
    fault = classify(cause)
    if isinstance(cause, FastqError) and cause.__cause__ is not None:
        fault = classify(cause.__cause__) or fault
    how = fault.value if fault is not None else "error"
    retry = f"; retry with {again} (idempotent)"
    url = mask_url(redis_url)
    if fault is Fault.UNAVAILABLE:
        maybe = "may or may not have gone in" if sent else "did not go in"
        what = f"{len(written)} of {len(ids)} jobs are in, the other {len(not_written)}"
        if len(ids) == 1 and not written:  # an enqueue's: the id to retry with
            what = f"job {ids[0]}"
        return EnqueueInterrupted(
            f"cannot reach Redis at {url} ({cause}): {what} {maybe}{retry}",
            ids=ids,
            written=written,
            not_written=not_written,
            fault=how,
        )
    return EnqueueError(
        f"Redis at {url} took {len(written)} of {len(ids)} jobs, "
        f"{len(not_written)} did not go in ({how}: {cause}){retry}",
        ids=ids,
        written=written,
        not_written=not_written,
        fault=how,
    )
