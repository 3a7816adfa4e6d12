"""What Redis said, classified once: every process of fastq asks here what an error
means and how long to wait before trying again.

Redis restarts, fails over, fills up, stalls, or refuses a command; none of that may
crash-loop a worker or lose a job. Each class of fault has one policy:

========================  ===============================================  ===========
fault                     replies                                          policy
========================  ===============================================  ===========
``UNAVAILABLE``           refused/reset/lost connection, timeout,          back off,
                          ``LOADING``, ``READONLY``, ``MASTERDOWN``,       retry
                          ``CLUSTERDOWN``, ``TRYAGAIN``, ``UNBLOCKED``;
                          on a cluster: a slot not covered, no node
                          reachable, ``MOVED`` in a worker's round trip
                          (:class:`fastq.worker.wire.cluster.SlotMoved`), a
                          command redis-py redirected until it gave up
``BUSY``                  ``BUSY`` (a script or module runs too long)      back off, retry
``OUT_OF_MEMORY``         ``OOM``                                          back off, retry
``NO_SCRIPT``             ``NOSCRIPT`` (flushed, or a fresh server)        reload, resend
``DENIED``                ``NOAUTH``, ``WRONGPASS``, ``NOPERM``,           back off slowly;
                          ``DENIED`` (protected mode: no password set,
                          and this host is not the loopback)
                                                                           an operator
                                                                           must act
``NO_DATABASE``           ``DB index is out of range`` (the URL's ``/db``  the same
                          is beyond the server's ``databases``)
========================  ===============================================  ===========

Anything else (a script's own ``error()``, a wrong type) is not a fault of Redis but
a bug: :func:`classify` returns None and the caller raises it.

:class:`Outage` turns a stream of failures into two log lines: one when trouble
starts (and one more for each other kind of trouble it meets), one when Redis
answers again, with how long it took.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from typing import Optional

import redis
from redis import exceptions as rex

from fastq.connection.url import mask_url
from fastq.errors import RedisRefused, RedisUnavailable


class Fault(enum.Enum):
    UNAVAILABLE = "unavailable"
    BUSY = "busy"
    OUT_OF_MEMORY = "out of memory"
    NO_SCRIPT = "scripts not loaded"
    DENIED = "access denied"
    NO_DATABASE = "no such database"

    @property
    def operator_must_act(self) -> bool:
        """Retrying cannot fix it: a password, an ACL, a database number."""
        return self is Fault.DENIED or self is Fault.NO_DATABASE


# Ordered: the first match wins (AuthenticationError is a ConnectionError).
_BY_TYPE: tuple[tuple[type[BaseException], Fault], ...] = (
    (rex.AuthenticationError, Fault.DENIED),
    (rex.AuthorizationError, Fault.DENIED),
    (rex.NoPermissionError, Fault.DENIED),
    (rex.NoScriptError, Fault.NO_SCRIPT),
    (rex.OutOfMemoryError, Fault.OUT_OF_MEMORY),
    (rex.ReadOnlyError, Fault.UNAVAILABLE),  # a demoted master: the new one is coming
    (rex.ClusterDownError, Fault.UNAVAILABLE),  # MASTERDOWN too
    (rex.TryAgainError, Fault.UNAVAILABLE),
    # redis-py's cluster client gave up on a command its redirections kept failing
    # ("TTL exhausted."): TRYAGAIN all along while its slot migrates (resharding)
    (rex.ClusterError, Fault.UNAVAILABLE),
    (rex.SlotNotCoveredError, Fault.UNAVAILABLE),  # no master for a slot (yet)
    (rex.ConnectionError, Fault.UNAVAILABLE),  # LOADING too (BusyLoadingError)
    (rex.TimeoutError, Fault.UNAVAILABLE),
    (ConnectionError, Fault.UNAVAILABLE),  # the OS's, and fastq.RedisUnavailable
    (TimeoutError, Fault.UNAVAILABLE),
)
# Replies redis-py leaves as a plain ResponseError, by their first word; a reply
# relayed from inside a script keeps its code too ("OOM command not allowed ...").
_BY_CODE = {
    "BUSY": Fault.BUSY,
    "OOM": Fault.OUT_OF_MEMORY,
    "NOPERM": Fault.DENIED,
    "NOAUTH": Fault.DENIED,
    "WRONGPASS": Fault.DENIED,
    # protected mode: a Redis without a password takes only loopback connections
    "DENIED": Fault.DENIED,
    "READONLY": Fault.UNAVAILABLE,
    "LOADING": Fault.UNAVAILABLE,
    "MASTERDOWN": Fault.UNAVAILABLE,
    "CLUSTERDOWN": Fault.UNAVAILABLE,
    "TRYAGAIN": Fault.UNAVAILABLE,
    # a BLPOP cut short as its master was demoted to a replica (a failover)
    "UNBLOCKED": Fault.UNAVAILABLE,
    "NOSCRIPT": Fault.NO_SCRIPT,
}


# redis-py's cluster client raises these (not RedisErrors) when it cannot read the
# slot map: no node it knows answers, or the masters that answer do not cover every
# slot (a failover under way). Its other RedisClusterExceptions are misuse: bugs.
_CLUSTER_UNREACHABLE = ("Redis Cluster cannot be connected", "All slots are not covered")


def classify(exc: BaseException) -> Optional[Fault]:
    """The fault ``exc`` reports, or None when it is no fault of Redis (a bug)."""
    for kind, fault in _BY_TYPE:
        if isinstance(exc, kind):
            return fault
    if isinstance(exc, rex.RedisClusterException):
        return Fault.UNAVAILABLE if str(exc).startswith(_CLUSTER_UNREACHABLE) else None
    if isinstance(exc, rex.ResponseError):
        if str(exc).startswith("DB index is out of range"):  # SELECT at connect
            return Fault.NO_DATABASE
        words = str(exc).split(maxsplit=1)
        code = getattr(exc, "status_code", None) or (words[0] if words else "")
        return _BY_CODE.get(code)
    return None


def unanswered(exc: BaseException) -> bool:
    """Did the server not answer at all (refused, cut, or silent until the timeout)?
    Then every other call to it would fail the same way, and as slowly."""
    return isinstance(exc, (rex.ConnectionError, rex.TimeoutError, OSError)) and not isinstance(
        exc, (rex.AuthenticationError, rex.BusyLoadingError)
    )


# What the retrying processes catch: every Redis error, classified afterwards
# (redis-py's cluster errors about the slot map are no RedisError).
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.RedisError,
    rex.RedisClusterException,
    ConnectionError,
    TimeoutError,
)


def backoff_s(failures: int, fault: Fault, *, base_s: float = 0.1, cap_s: float = 5.0) -> float:
    """How long to wait after the ``failures``-th failure in a row (1 = the first):
    exponential with jitter, so that 32 children do not retry in step. Refusals
    an operator must fix are retried slowly: retrying cannot fix them."""
    if fault.operator_must_act:
        base_s = cap_s
    delay = min(cap_s, base_s * 2 ** min(failures - 1, 8))
    return float(delay * (0.5 + random.random() / 2))


def for_producer(exc: BaseException, url: str) -> Exception:
    """The fastq error a producer raises for a Redis error (chain it with ``from``)."""
    fault = classify(exc)
    url = mask_url(url)
    if fault is Fault.UNAVAILABLE:
        return RedisUnavailable(f"cannot reach Redis at {url}: {exc}")
    if fault is None:
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))
    return RedisRefused(fault.value, f"Redis at {url} refused the call ({fault.value}): {exc}")


_HINTS = {
    Fault.DENIED: " (check the password or ACL; retrying slowly)",
    Fault.NO_DATABASE: " (check the /db of the URL; retrying slowly)",
}


class Outage:
    """Tracks one connection's trouble so that it is logged once per episode.

    ``failed(exc)`` returns how long to wait before the next try (growing with
    each failure in a row, up to a cap), logging only when an episode starts or
    meets a kind of fault it had not met yet (a restart's refused connections,
    then ``LOADING``, then refused again is one line); ``recovered()`` logs the end.
    Call it only after Redis answered a call: a pass that called nothing (every
    node in its backoff) must not end the episode, else each retry logs a pair.
    ``retry_at``: when that wait ends (``time.monotonic()``), 0 once recovered.
    """

    def __init__(self, who: str, logger: logging.Logger) -> None:
        self.who = who
        self.log = logger
        self.fault: Optional[Fault] = None
        self._told: set[Fault] = set()  # the kinds logged in this episode
        self.failures = 0
        self.since = 0.0
        self.retry_at = 0.0

    @property
    def ongoing(self) -> bool:
        return self.fault is not None

    def failed(self, exc: BaseException) -> float:
        """Note a failure; returns the delay before the next try.

        Raises:
            exc: itself, when it is not a fault of Redis (a bug must surface).
        """
        fault = classify(exc)
        if fault is None:
            raise exc
        if self.fault is None:
            self.since = time.monotonic()
        self.failures += 1
        if fault not in self._told:
            self._told.add(fault)
            level = logging.ERROR if fault.operator_must_act else logging.WARNING
            hint = _HINTS.get(fault, "")
            self.log.log(
                level, "%s: Redis %s: %s%s; retrying with backoff", self.who, fault.value, exc, hint
            )
        self.fault = fault
        delay_s = backoff_s(self.failures, fault)
        self.retry_at = time.monotonic() + delay_s
        return delay_s

    def recovered(self) -> None:
        """Redis answered: end the episode, if one was on."""
        self.retry_at = 0.0
        if self.fault is None:
            return
        self.log.warning(
            "%s: Redis back after %.1f s (%s, %d failed tries)",
            self.who,
            time.monotonic() - self.since,
            self.fault.value,
            self.failures,
        )
        self.fault = None
        self._told.clear()
        self.failures = 0
