"""The producer's verb: ``enqueue`` (a batch of jobs of one queue, with its options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

import orjson

from fastq.protocol.contracts.base import Contract

UNIQUE_MODES = {"end": "e", "start": "s", "window": "w"}  # unique_until -> its code


@dataclass(frozen=True)
class EnqueueReply:
    """``added``: jobs added; ``holders``: the position in the call (from 0) of each
    unique job refused because its key was locked, and the id holding the lock."""

    added: int
    holders: dict[int, str]


def enqueue_extras(
    tags: Sequence[str] = (),
    unique_until: Optional[str] = None,
    unique_for_ms: int = 0,
    batch: Optional[str] = None,
) -> bytes:
    """The ``extras`` ARGV of an enqueue: empty for a plain batch of jobs."""
    extras: dict[str, Any] = {}
    if batch is not None:
        extras["batch"] = batch
    if tags:
        extras["tags"] = list(tags)
    if unique_until is not None:
        extras["unique"] = UNIQUE_MODES[unique_until]
        extras["unique_for_ms"] = unique_for_ms
    return orjson.dumps(extras) if extras else b""


class _Enqueue(Contract[EnqueueReply]):
    keys = (
        "jobs",
        "ready",
        "prio",
        "scheduled",
        "stats",
        "wake",
        "sched_prio",
        "cancelled",
        "links",
        "tagged",
        "unique",
        "unique_exp",
        "settings",
        "records",
        "records_old",
        "batched",
        "batches",
        "chained",
        "group_ready",
        "group_ring",
    )
    argv_names = ("priority", "due", "extras")
    argv_rest = "jobs"

    def argv(
        self,
        priority: int,
        due: Union[int, str],
        extras: bytes,
        ids: Iterable[Any],
        envs: Iterable[bytes],
        unique_keys: Optional[Iterable[str]] = None,
    ) -> list[Any]:
        """``due``: a delay in ms (0: ready now), or :func:`due_at` of a due time;
        ``extras``: :func:`enqueue_extras`; ``unique_keys``, one per job, when the
        extras name a unique mode."""
        argv: list[Any] = [priority, due, extras]
        if unique_keys is None:
            # id, envelope, id, ...: by two slice stores, not two appends per job
            ids, envs = list(ids), list(envs)
            n = min(len(ids), len(envs))
            pairs: list[Any] = [None] * (2 * n)
            pairs[0::2] = ids[:n]
            pairs[1::2] = envs[:n]
            argv += pairs
        else:
            for job_id, env, ukey in zip(ids, envs, unique_keys):
                argv += (job_id, env, ukey)
        return argv

    def parse(self, raw: Any) -> EnqueueReply:
        """The number of jobs added (an int), or with unique jobs ``{added, i1,
        holder1, ...}`` (positions from 1)."""
        if not isinstance(raw, list):
            return EnqueueReply(int(raw), {})
        holders = {int(raw[i]) - 1: raw[i + 1].decode() for i in range(1, len(raw) - 1, 2)}
        return EnqueueReply(int(raw[0]), holders)


ENQUEUE = _Enqueue("enqueue")


def due_at(at_ms: int) -> str:
    """The ``due`` ARGV of an enqueue due at Unix time ``at_ms`` on Redis' clock."""
    return f"@{at_ms}"
