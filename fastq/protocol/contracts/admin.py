"""An operator's verbs: ``purge``, ``cancel`` (by id or by tag), ``revive`` (``fastq
dead retry``, ``fastq broken retry``), ``fold`` (the records of ended jobs, before
they are read)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Optional, Sequence

from fastq.protocol.contracts.base import Contract

# -- purge -----------------------------------------------------------------------------


PURGE_BATCH_MAX = 5000  # purge.lua refuses more: unpack() is bounded by Lua's stack


class _Purge(Contract[tuple[int, int]]):
    keys = (
        "ready",
        "prio",
        "scheduled",
        "sched_prio",
        "dead",
        "poison",
        "broken",
        "jobs",
        "stalls",
        "stats",
        "links",
        "tagged",
        "unique",
        "unique_exp",
        "batched",
        "batches",
        "batches_due",
        "chained",
        "group_ready",
        "group_ring",
    )
    argv_names = ("limit", "ready", "scheduled", "dead", "broken")

    def argv(self, limit: int, ready: bool, scheduled: bool, dead: bool, broken: bool) -> list[Any]:
        return [limit, int(ready), int(scheduled), int(dead), int(broken)]

    def parse(self, raw: Any) -> tuple[int, int]:
        """``(taken, deleted)``: the ids taken from the sections (fewer than
        ``limit``: they are empty) and the jobs deleted among them (a cancelled
        job's id, still in the ready list, is taken but no job)."""
        taken, deleted = raw
        return int(taken), int(deleted)


PURGE = _Purge("purge")


# -- cancel ----------------------------------------------------------------------------


CANCEL_BATCH_MAX = 1000  # cancel.lua refuses more: one call stays short


@dataclass(frozen=True)
class CancelReply:
    """``stopped``: jobs cancelled that will never run; ``held``: jobs cancelled that
    a worker already held (they may still run); ``handled``: ids looked at (by tag:
    fewer than the limit means no entry of the tag is left). ``stale``: the workers
    given were not those holding leases; nothing was done, read them again."""

    stopped: int
    held: int
    handled: int

    @property
    def stale(self) -> bool:
        return self.stopped < 0


class _Cancel(Contract[CancelReply]):
    keys = (
        "jobs",
        "scheduled",
        "sched_prio",
        "prio",
        "dead",
        "broken",
        "cancelled",
        "stalls",
        "stats",
        "links",
        "tagged",
        "unique",
        "unique_exp",
        "leases",
        "settings",
        "records",
        "records_old",
        "batched",
        "batches",
        "batches_due",
        "chained",
    )
    keys_rest = "held"
    argv_names = ("tag", "limit", "workers")
    argv_rest = "rest"

    def argv(
        self, tag: str, limit: int, workers: Sequence[str] = (), ids: Iterable[Any] = ()
    ) -> list[Any]:
        """A tag (and no ids), or ``tag=""`` and at most ``limit`` ids. ``workers``:
        every worker in the queue's leases, whose held sets follow the KEYS."""
        return [tag, limit, len(workers), *workers, *ids]

    def parse(self, raw: Any) -> CancelReply:
        return CancelReply(int(raw[0]), int(raw[1]), int(raw[2]))


CANCEL = _Cancel("cancel")


# -- revive (fastq dead retry, fastq broken retry) -------------------------------------


REVIVE_BATCH_MAX = 500  # jobs per revive call: one call stays short


class ReviveSection(str, Enum):
    """Where ``revive`` takes its jobs from."""

    DEAD = "dead"
    BROKEN = "broken"


class _Revive(Contract[int]):
    keys = (
        "jobs",
        "dead",
        "poison",
        "broken",
        "stalls",
        "ready",
        "prio",
        "stats",
        "wake",
        "settings",
        "group_ready",
        "group_ring",
    )
    argv_names = ("section",)
    argv_rest = "jobs"

    def argv(self, section: ReviveSection, jobs: Iterable[tuple[str, bytes, int]]) -> list[Any]:
        """``jobs``: (id, envelope to queue, priority) of each job to revive."""
        return [section.value, *(part for job in jobs for part in job)]

    def parse(self, raw: Any) -> int:
        """Jobs revived (those no longer in the section, or without an envelope, are not)."""
        return int(raw)


REVIVE = _Revive("revive")


class _Delete(Contract[bool]):
    keys = ("jobs", "dead", "broken", "poison", "stalls", "stats")
    argv_names = ("job_id",)

    def argv(self, job_id: str) -> list[Any]:
        return [job_id]

    def parse(self, raw: Any) -> bool:
        """Was the job dead or broken, and is it gone now?"""
        return bool(int(raw))


DELETE = _Delete("delete")


# -- group_pause (a group paused or resumed) ----------------------------------------------


class _GroupPause(Contract[bool]):
    keys = ("settings", "wake")
    argv_names = ("mode", "group")

    def argv(self, mode: str, group: str) -> list[Any]:
        return [mode, group]

    def parse(self, raw: Any) -> bool:
        """Did the group's state change (False: it was so already)?"""
        return bool(int(raw))


GROUP_PAUSE = _GroupPause("group_pause")


# -- fold (the records of ended jobs) --------------------------------------------------


class _Fold(Contract[list[Optional[bytes]]]):
    keys = ("records", "records_old")
    argv_rest = "ids"

    def argv(self, ids: Iterable[Any] = ()) -> list[Any]:
        """``ids``: those whose records to read once every logged one is folded."""
        return list(ids)

    def parse(self, raw: Any) -> list[Optional[bytes]]:
        """The raw record of each id asked (None: none)."""
        return list(raw)


FOLD = _Fold("fold")
