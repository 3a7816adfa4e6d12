"""The options of an enqueue, declared once: :class:`EnqueueOptions` is what every
enqueue path (``app.enqueue``, ``app.enqueue_many``, ``JobDef.enqueue_with``,
``JobDef.enqueue_many``) builds from its keywords, checked before anything reaches
Redis; :class:`EnqueueKeywords` is the typed face of those keywords."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Optional, Sequence, TypedDict, Union

from fastq.retry import Backoff, check_age_limit_s, check_retries
from fastq.validate import (
    check_at,
    check_delay_s,
    check_job_id,
    check_priority,
    check_queue_name,
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

    @classmethod
    def of(cls, options: Mapping[str, Any], what: str) -> EnqueueOptions:
        """The options an enqueue method ``what`` was given as keywords.

        Raises:
            TypeError: an unknown option (a misspelt one is never ignored).
        """
        for name in options:
            if name not in _FIELDS:
                raise TypeError(
                    f"{what}() got an unexpected keyword argument {name!r} (its options: "
                    f"{', '.join(_FIELDS)})"
                )
        return cls(**options)

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


class EnqueueKeywords(EnqueueManyKeywords, total=False):
    """The keywords of an enqueue of one call: each field of :class:`EnqueueOptions`."""

    job_id: Optional[str]
