"""Unique jobs at enqueue: how the jobs of one enqueue are unique, and their keys."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import orjson

from fastq.job import JobDef
from fastq.options import EnqueueOptions


@dataclass(frozen=True)
class UniquePlan:
    """How the jobs of one enqueue are unique: ``until`` (see
    ``fastq.validate.UNIQUE_UNTIL``), the window in ms and a fixed key (None: each job's
    :func:`default_unique_key`)."""

    until: str
    window_ms: int
    key: Optional[str]


def unique_plan(options: EnqueueOptions, job: Optional[JobDef[Any]]) -> Optional[UniquePlan]:
    """The uniqueness of an enqueue: its options over the job's own; None: not unique.

    Raises:
        ValueError: ``unique_key`` or ``unique_until`` without a ``unique_for_s``
            (on the enqueue or the job); ``shard_key`` with one (a unique job's
            shard is its unique key's, where its lock lives).
    """
    window_s = options.unique_for_s
    if window_s is None and job is not None:
        window_s = job.unique_for_s
    if window_s is None:
        if options.unique_key is not None or options.unique_until is not None:
            raise ValueError(
                "unique_key and unique_until need unique_for_s (on the enqueue or in "
                "@app.job): how long the lock may last"
            )
        return None
    if options.shard_key is not None:
        raise ValueError(
            "shard_key= cannot apply to a unique job: its shard is its unique key's, so "
            "that its lock is found by every enqueue of the same key"
        )
    until = options.unique_until or (job.unique_until if job is not None else None) or "end"
    return UniquePlan(until, max(1, math.ceil(window_s * 1000)), options.unique_key)


def default_unique_key(name: str, args: Sequence[Any], kwargs: Optional[dict[str, Any]]) -> str:
    """A unique job's default key: the SHA-1 (hex) of the canonical JSON (sorted keys)
    of ``[name, args, kwargs]``; the same call gives the same key on any host."""
    canonical = orjson.dumps([name, list(args), kwargs or {}], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha1(canonical).hexdigest()


def call_unique_key(name: str, call: Any) -> str:
    """The default unique key of one call of ``enqueue_many`` (args or kwargs)."""
    if isinstance(call, dict):
        return default_unique_key(name, (), call)
    return default_unique_key(name, call, None)
