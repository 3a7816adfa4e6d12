"""Exceptions users see, and the two a job raises (or returns) to steer its fate."""

from __future__ import annotations

from typing import Optional, Sequence

from fastq.validate import check_delay_s


class FastqError(Exception):
    """Base class of fastq's own errors."""


class RedisUnavailable(FastqError, ConnectionError):
    """Redis could not be reached (refused, timed out, connection lost)."""


class RedisRefused(FastqError):
    """Redis answered but refused the call: out of memory (``OOM``), a password or
    ACL that does not allow it (``NOAUTH``, ``WRONGPASS``, ``NOPERM``), or busy.

    Attributes:
        fault: what kind of refusal, e.g. ``"out of memory"`` or ``"access denied"``.
    """

    def __init__(self, fault: str, message: str) -> None:
        super().__init__(message)
        self.fault = fault


class UnknownQueue(FastqError, ValueError):
    """An enqueue on a queue that neither the app nor the namespace knows (a typo?):
    nothing was written. ``app.declare_queue(name)`` makes a new queue on purpose."""

    def __init__(self, queue: str, known: Sequence[str]) -> None:
        super().__init__(
            f"unknown queue {queue!r}: no job of this app is registered on it and nothing "
            f"was ever enqueued on it (known: {', '.join(known) or 'none'}); a new queue "
            f"on purpose: app.declare_queue({queue!r}) first"
        )
        self.queue = queue
        self.known = list(known)


class ShardCountMismatch(FastqError, ValueError):
    """The app declares a shard count for a queue (``shards=K``) other than the one
    Redis records for it (``<namespace>:shards``): nothing was written. The count
    of a queue cannot change under its producers and workers (see "Sharded queues"
    in docs/queues.md to change it)."""

    def __init__(self, queue: str, declared: int, stored: int, shards_key: str) -> None:
        super().__init__(
            f"queue {queue!r} has {stored} shard{'s' if stored > 1 else ''} in Redis "
            f"({shards_key}) but this app declares shards={declared}: the count of "
            "a queue cannot change under its producers and workers (see 'Sharded queues' "
            "in docs/queues.md to change it)"
        )
        self.queue, self.declared, self.stored = queue, declared, stored


class EnqueueError(FastqError):
    """Some jobs of an ``enqueue_many`` went into Redis and others did not.

    A blast is sent in chunks, each one atomic script call: a chunk went in whole
    or not at all. Retrying with the same ids is idempotent (an id already in
    Redis is left alone, and so is one whose job ran meanwhile, while the queue
    keeps its record: see ``App.keep_records``), so the way to finish the job is::

        try:
            ids = send_email.enqueue_many(calls)
        except fastq.EnqueueError as exc:
            ...  # wait for Redis to have room again, then:
            ids = send_email.enqueue_many(calls, job_ids=exc.ids)

    Attributes:
        ids: every id of the call, in the order of its calls.
        written: the ids Redis took.
        not_written: the others (for :class:`EnqueueInterrupted`, those that may
            or may not have gone in).
        fault: what Redis said, as classified by ``fastq.connection.faults`` (e.g.
            ``"out of memory"``), or ``"error"`` when it is no fault of Redis. The
            error itself is chained as ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        ids: Sequence[str],
        written: Sequence[str],
        not_written: Sequence[str],
        fault: str,
    ) -> None:
        super().__init__(message)
        self.ids = list(ids)
        self.written = list(written)
        self.not_written = list(not_written)
        self.fault = fault


class EnqueueInterrupted(EnqueueError, RedisUnavailable):
    """The connection to Redis was lost during an ``enqueue_many``: the ids in
    ``not_written`` may or may not have gone in. Also a :class:`RedisUnavailable`
    (and a builtin ``ConnectionError``). Retry with ``job_ids=exc.ids``."""


class NotReplicated(EnqueueError):
    """An enqueue of an ``App(min_replicas=n)``: every job is on the master, but fewer
    than ``n`` replicas confirmed it within ``replica_timeout_s``, so a failover now
    could lose it. An ``EnqueueError`` so that the usual retry finishes the job:
    ``job_ids=exc.ids`` (or ``job_id=exc.ids[0]``) adds nothing twice and waits for
    the replicas again.

    Attributes:
        ids, written: every id of the call (all on the master); ``not_written`` is empty.
        replicas: how many replicas confirmed within the timeout (the fewest of
            the call's round trips).
        min_replicas: how many the app asks for.
        fault: ``"not replicated"``; what Redis said, when it refused ``WAIT``
            itself, is chained as ``__cause__``.
    """

    def __init__(self, message: str, *, ids: Sequence[str], replicas: int, min_replicas: int):
        super().__init__(message, ids=ids, written=ids, not_written=(), fault="not replicated")
        self.replicas = replicas
        self.min_replicas = min_replicas


class Retry(Exception):
    """Raise or return from a job to run it again later.

    Args:
        delay_s: seconds to wait before the next attempt, a finite number within
            [0, ten years]; ``None`` uses the job's backoff policy. The attempt
            still counts against the job's ``retries``.
        slow_key: the job's resource asked to slow down (an SMTP server's 421): its
            per-key limit's key (the job's formatted ``rate_key``) starts no job for
            ``delay_s``, on any worker, and this job comes back after it. Needs
            ``delay_s``; a job with no ``rate_key`` has no key to slow (a warning).

    Raises:
        TypeError, ValueError: a ``delay_s`` out of range, or ``slow_key`` without one.
    """

    def __init__(self, delay_s: Optional[float] = None, *, slow_key: bool = False) -> None:
        if delay_s is not None:
            check_delay_s(delay_s, "Retry delay_s")
        if not isinstance(slow_key, bool):
            raise TypeError(f"Retry slow_key must be a bool, not {slow_key!r}")
        if slow_key and delay_s is None:
            raise ValueError("Retry(slow_key=True) needs delay_s: how long the key rests")
        super().__init__(delay_s)
        self.delay_s = delay_s
        self.slow_key = slow_key


class Fail(Exception):
    """Raise or return from a job to fail it for good: it goes to the dead set."""

    def __init__(self, reason: str = "failed") -> None:
        super().__init__(reason)
        self.reason = str(reason)


class JobTimeout(BaseException):
    """Raised inside a job that ran past its ``timeout_s``.

    A BaseException, so that a job's own ``except Exception`` cannot swallow it;
    the worker settles it like a failure (retried while attempts remain).
    """


class ResultNotSerializable(FastqError, TypeError):
    """A job kept for its result (``result_ttl_s``) returned a value JSON cannot
    encode (or NaN/infinity, or one too large). Raised in the worker, where the
    job fails with it and is retried or buried by its policy, never lost."""


class JobFailed(FastqError):
    """``app.result()`` of a job that died (dead or broken): ``error`` is the
    job's last error (or why it was quarantined), ``traceback`` its traceback."""

    def __init__(self, job_id: str, state: str, error: Optional[str], traceback: Optional[str]):
        super().__init__(f"job {job_id} is {state}: {error or 'no error recorded'}")
        self.job_id = job_id
        self.state = state
        self.error = error
        self.traceback = traceback


class ResultTimeout(FastqError, TimeoutError):
    """``app.result()`` waited ``timeout_s`` and the job has not finished."""


class NoResult(FastqError, LookupError):
    """``app.result()`` of a job that is gone without a result: an unknown id, a
    job registered without ``result_ttl_s``, or a result that expired."""


class BatchClosed(FastqError, ValueError):
    """A job or a batch was to join a batch that is closed, cancelled, ended or
    unknown: nothing joined it. ``batch_id`` names it, ``state`` says which."""

    def __init__(self, batch_id: str, state: str) -> None:
        why = {"": "does not exist (never opened, or expired)"}.get(state, f"is {state}")
        super().__init__(f"batch {batch_id!r} {why}: no job joins it now")
        self.batch_id = batch_id
        self.state = state
