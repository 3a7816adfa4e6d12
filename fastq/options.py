"""Option sets declared once.

- :class:`EnqueueOptions`: what every enqueue path (``app.enqueue``,
  ``app.enqueue_many``, ``JobDef.enqueue_with``, ``JobDef.enqueue_many``) builds
  from its keywords, checked before anything reaches Redis;
  :class:`EnqueueKeywords` is the typed face of those keywords.
- :class:`JobOptions`: what ``@app.job(...)`` (and ``@app.periodic(...)``) takes,
  checked when the decorator is made; :class:`JobKeywords` is its typed face.

A unit test (``tests/unit/test_public_surface.py``) holds each typed face equal to
its dataclass.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Optional, Sequence, TypedDict, Union

from fastq.policy import Delivery, JobPolicy, check_delivery
from fastq.retry import Backoff, check_age_limit_s, check_retries, policy_from_keywords
from fastq.validate import (
    RateLimit,
    check_at,
    check_delay_s,
    check_group,
    check_job_id,
    check_priority,
    check_queue_name,
    check_rate_limit,
    check_result_ttl_s,
    check_shard_key,
    check_tags,
    check_unique_for_s,
    check_unique_key,
    check_unique_until,
)


@dataclass(frozen=True)
class EnqueueOptions:
    """How to enqueue a job, checked when made (before anything reaches Redis).

    ``None`` means the job's own setting (its queue, its priority) or a fresh id.
    Adding an option is adding a field here, with its check in ``__post_init__``,
    and to :class:`EnqueueManyKeywords` (the typed face of every enqueue method's
    ``**options``; a unit test holds the two equal).

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
    group: Optional[str] = None

    @classmethod
    def of(cls, options: Mapping[str, Any], what: str) -> EnqueueOptions:
        """The options an enqueue method ``what`` was given as keywords.

        Raises:
            TypeError: an unknown option (a misspelt one is never ignored).
        """
        return cls(**_known(options, _FIELDS, what))

    def __post_init__(self) -> None:
        check_delay_s(self.delay_s)
        if self.shard_key is not None:
            check_shard_key(self.shard_key)
        if self.group is not None:
            check_group(self.group)
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


def _known(options: Mapping[str, Any], names: Sequence[str], what: str) -> Mapping[str, Any]:
    for name in options:
        if name not in names:
            raise TypeError(
                f"{what}() got an unexpected keyword argument {name!r} (its options: "
                f"{', '.join(names)})"
            )
    return options


_FIELDS = tuple(f.name for f in dataclasses.fields(EnqueueOptions))
NO_OPTIONS = EnqueueOptions()


class EnqueueManyKeywords(TypedDict, total=False):
    """The keywords of an enqueue of many calls: each field of
    :class:`EnqueueOptions` but ``job_id`` (``job_ids=`` names one per call)."""

    delay_s: float
    at: Union[datetime, float, None]
    priority: Optional[int]
    queue: Optional[str]
    retry: Optional[Backoff]
    retries: Optional[int]
    age_limit_s: Optional[float]
    tags: Optional[Sequence[str]]
    unique_for_s: Optional[float]
    unique_key: Optional[str]
    unique_until: Optional[str]
    shard_key: Optional[str]
    group: Optional[str]


class EnqueueKeywords(EnqueueManyKeywords, total=False):
    """The keywords of an enqueue of one call: each field of :class:`EnqueueOptions`."""

    job_id: Optional[str]


def exception_types(types: object, what: str) -> tuple[type[BaseException], ...]:
    """``types`` (one exception class, or an iterable of them) as a tuple."""
    if isinstance(types, type):
        return (types,)  # checked by JobPolicy
    if isinstance(types, (str, bytes)) or not hasattr(types, "__iter__"):
        raise TypeError(f"{what} must be a tuple of exception classes, not {types!r}")
    return tuple(types)


@dataclass(frozen=True)
class JobOptions:
    """The options of ``@app.job(...)``, checked when made (see :meth:`fastq.App.job`
    for each); what they make of a job is kept beside them: its retry ``policy``, its
    ``mode`` of delivery and its per-key rate limit (``key_limit``).

    Raises:
        TypeError, ValueError: as :meth:`fastq.App.job` says.
    """

    name: Optional[str] = None
    queue: str = "default"
    priority: int = 0
    retries: int = 5
    backoff_s: Optional[float] = None
    max_backoff_s: Optional[float] = None
    jitter: Optional[float] = None
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout_s: Optional[float] = None
    retry: Optional[Backoff] = None
    retry_delays_s: Optional[Sequence[float]] = None
    fail_on: tuple[type[BaseException], ...] = ()
    age_limit_s: Optional[float] = None
    result_ttl_s: Optional[float] = None
    delivery: str = "at_least_once"
    rate_key: Optional[str] = None
    rate: Optional[int] = None
    per_s: float = 1.0
    burst: Optional[int] = None
    unique_for_s: Optional[float] = None
    unique_until: str = "end"
    shards: Optional[int] = None
    group: Optional[str] = None
    circuit_key: Optional[str] = None
    circuit_failures: Optional[int] = None
    circuit_open_s: Optional[float] = None
    policy: JobPolicy = field(init=False)
    mode: Delivery = field(init=False)
    key_limit: Optional[RateLimit] = field(init=False)

    @classmethod
    def of(cls, options: Mapping[str, Any], what: str) -> JobOptions:
        """The options ``what`` (``job``, ``periodic``) was given as keywords.

        Raises:
            TypeError: an unknown option; the rest as the class says.
        """
        return cls(**_known(options, _JOB_FIELDS, what))

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        check_priority(self.priority)
        if self.result_ttl_s is not None:
            check_result_ttl_s(self.result_ttl_s)
        mode = check_delivery(self.delivery)
        if mode is Delivery.AT_MOST_ONCE:
            given = {
                "retry": self.retry,
                "backoff_s": self.backoff_s,
                "max_backoff_s": self.max_backoff_s,
                "jitter": self.jitter,
                "retry_delays_s": self.retry_delays_s,
                "age_limit_s": self.age_limit_s,
            }
            retry_options = [option for option, value in given.items() if value is not None]
            if retry_options:
                raise ValueError(
                    f"an at-most-once job is never retried: {', '.join(retry_options)} "
                    "would never apply"
                )
            if self.rate_key is not None:
                raise ValueError(
                    "rate_key= cannot apply to an at-most-once job: a job waiting for its "
                    "key's token is rescheduled, and an at-most-once job has left the "
                    "queue by then"
                )
            if self.circuit_key is not None:
                raise ValueError(
                    "circuit_key= cannot apply to an at-most-once job: a job waiting for "
                    "its circuit to close is rescheduled, and an at-most-once job has "
                    "left the queue by then"
                )
        if self.circuit_key is None and (
            self.circuit_failures is not None or self.circuit_open_s is not None
        ):
            raise ValueError("circuit_failures= and circuit_open_s= need a circuit_key=")
        key_limit = None
        if self.rate_key is not None or self.rate is not None:
            if self.rate_key is None or self.rate is None:
                raise ValueError(
                    "a per-key rate limit needs both rate_key= and rate= (a limit of the "
                    "whole queue is app.set_rate_limit(queue, rate))"
                )
            key_limit = check_rate_limit(self.rate, self.per_s, self.burst)
        if self.unique_for_s is not None:
            check_unique_for_s(self.unique_for_s)
        check_unique_until(self.unique_until)
        policy = JobPolicy(
            retries=self.retries,
            backoff=policy_from_keywords(
                self.retry, self.backoff_s, self.max_backoff_s, self.jitter, self.retry_delays_s
            ),
            retry_on=exception_types(self.retry_on, "retry_on"),
            timeout_s=self.timeout_s,
            fail_on=exception_types(self.fail_on, "fail_on"),
            age_limit_s=self.age_limit_s,
        )
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "key_limit", key_limit)


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobOptions) if f.init)


class JobKeywords(TypedDict, total=False):
    """The keywords of ``@app.job(...)``: each option of :class:`JobOptions`."""

    name: Optional[str]
    queue: str
    priority: int
    retries: int
    backoff_s: Optional[float]
    max_backoff_s: Optional[float]
    jitter: Optional[float]
    retry_on: tuple[type[BaseException], ...]
    timeout_s: Optional[float]
    retry: Optional[Backoff]
    retry_delays_s: Optional[Sequence[float]]
    fail_on: tuple[type[BaseException], ...]
    age_limit_s: Optional[float]
    result_ttl_s: Optional[float]
    delivery: str
    rate_key: Optional[str]
    rate: Optional[int]
    per_s: float
    burst: Optional[int]
    unique_for_s: Optional[float]
    unique_until: str
    shards: Optional[int]
    group: Optional[str]
    circuit_key: Optional[str]
    circuit_failures: Optional[int]
    circuit_open_s: Optional[float]
