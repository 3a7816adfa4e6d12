"""The reaper's verbs: ``reap`` (leases that lapsed, due jobs, the dead set) and
``fire`` (periodic jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastq.protocol.contracts.base import Contract

# -- reap ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReapReply:
    """Due jobs promoted, when the next lease lapses and the next scheduled job is
    due (ms, -1 for never), and the workers whose lease has expired."""

    promoted: int
    next_deadline_ms: int
    next_due_ms: int
    expired_workers: list[str]


class _Reap(Contract[ReapReply]):
    keys = (
        "ready",
        "leases",
        "jobs",
        "dead",
        "stats",
        "wake",
        "scheduled",
        "prio",
        "poison",
        "sched_prio",
        "cancelled",
        "unique",
        "unique_exp",
        "settings",
        "records",
        "records_old",
        "group_ready",
        "group_ring",
    )
    argv_names = ("limit", "dead_max_age_ms", "dead_max_len")

    def argv(self, limit: int, dead_max_age_ms: int, dead_max_len: int) -> list[Any]:
        return [limit, dead_max_age_ms, dead_max_len]

    def parse(self, raw: Any) -> ReapReply:
        return ReapReply(int(raw[0]), int(raw[1]), int(raw[2]), [w.decode() for w in raw[3:]])


REAP = _Reap("reap")


# -- fire (periodic jobs) --------------------------------------------------------------


class FireOutcome(int, Enum):
    """What a ``fire`` call did with the slot it was given."""

    ALREADY = 0  # this slot, or a later one, was fired before (by any reaper)
    FIRED = 1  # the run is enqueued
    SKIPPED = 2  # the last run still lives (queued, retrying, running): slot passed over
    NOT_DUE = 3  # by Redis' clock the slot is still ahead; nothing written


@dataclass(frozen=True)
class FireReply:
    """``last_slot_ms``: the slot fired before this call (-1: never); ``now_ms``:
    Redis' clock."""

    outcome: FireOutcome
    now_ms: int
    last_slot_ms: int


class _Fire(Contract[FireReply]):
    keys = ("periodic", "periodic_run", "jobs", "ready", "prio", "stats", "wake", "dead", "broken")
    argv_names = ("name", "slot_ms", "overlap", "priority", "job_id", "envelope")

    def argv(
        self, name: str, slot_ms: int, overlap: bool, priority: int, job_id: str, envelope: bytes
    ) -> list[Any]:
        return [name, slot_ms, int(overlap), priority, job_id, envelope]

    def parse(self, raw: Any) -> FireReply:
        return FireReply(FireOutcome(int(raw[0])), int(raw[1]), int(raw[2]))


FIRE = _Fire("fire")
