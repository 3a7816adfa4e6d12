"""The contract of each Lua script, declared once: its KEYS, its ARGV, its reply.

A declaration names its script's KEYS by ``QueueKeys`` attribute (``held`` takes
the worker id), builds its ARGV from named parameters and parses its reply into
a typed value. Nothing else in fastq knows a KEYS order, an ARGV layout or the
position of a field in a reply; ``tests/lua/test_contracts.py`` checks every
script's header against its declaration.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Iterable, Mapping, Optional, Sequence, TypeVar, Union

import orjson
import redis

from fastq._accel import codec
from fastq.protocol import scripts
from fastq.protocol.keys import QueueKeys

R = TypeVar("R")


class ReleaseMode(str, Enum):
    """How ``release`` hands a worker's leased jobs back to the front of the queue."""

    UNSTARTED = "unstarted"  # claimed, never run; nothing counted
    ORPHANED = "orphaned"  # held by a worker that died, not the job it ran; counted
    STALLED = "stalled"  # the job its worker died or hung running: counts a stall
    EXPIRED = "expired"  # a reaper's take-back of a lapsed lease; counts a stall
    INTERRUPTED = "interrupted"  # the job in hand at an operator's hard stop; no stall


class Contract(Generic[R]):
    """One script's declaration. Subclasses add ``argv(...)`` and ``parse(raw)``.

    Attributes:
        script: the loaded script.
        keys: its KEYS, in order, as ``QueueKeys`` attribute names.
        argv_names: its fixed ARGV, in order; ``argv_rest`` names the variadic tail.
    """

    keys: tuple[str, ...] = ()
    argv_names: tuple[str, ...] = ()
    argv_rest: Optional[str] = None

    def __init__(self, name: str) -> None:
        self.script = scripts.BY_NAME[name]

    @property
    def name(self) -> str:
        return self.script.name

    def keys_for(self, k: QueueKeys, worker_id: Optional[str] = None) -> list[str]:
        """The KEYS of a call on ``k``'s queue (for ``worker_id`` if it holds leases).
        Precompute them where a call is repeated: this is not free."""
        out = []
        for attr in self.keys:
            if attr == "held":
                if worker_id is None:
                    raise TypeError(f"{self.name}: its KEYS need a worker id")
                out.append(k.held(worker_id))
            else:
                out.append(getattr(k, attr))
        return out

    def parse(self, raw: Any) -> R:
        raise NotImplementedError

    def command(self, keys: Sequence[Any], argv: Sequence[Any]) -> scripts.Command:
        """A call to send with ``scripts.call_many`` or a worker's round trip."""
        return (self.script, keys, argv)

    def call(self, client: redis.Redis, keys: Sequence[Any], argv: Sequence[Any]) -> R:
        """Run the script once and parse its reply."""
        return self.parse(scripts.call(client, self.script, keys, argv))


# -- enqueue ---------------------------------------------------------------------------


UNIQUE_MODES = {"end": "e", "start": "s", "window": "w"}  # unique_until -> its code


@dataclass(frozen=True)
class EnqueueReply:
    """``added``: jobs added; ``holders``: the position in the call (from 0) of each
    unique job refused because its key was locked, and the id holding the lock."""

    added: int
    holders: dict[int, str]


def enqueue_extras(
    tags: Sequence[str] = (), unique_until: Optional[str] = None, unique_for_ms: int = 0
) -> bytes:
    """The ``extras`` ARGV of an enqueue: empty for a plain batch."""
    extras: dict[str, Any] = {}
    if tags:
        extras["tags"] = list(tags)
    if unique_until is not None:
        extras["unique"] = UNIQUE_MODES[unique_until]
        extras["unique_for_ms"] = unique_for_ms
    return orjson.dumps(extras) if extras else b""


class _Enqueue(Contract[EnqueueReply]):
    keys = (
        "jobs", "ready", "prio", "scheduled", "stats", "wake", "sched_prio", "cancelled",
        "links", "tagged", "unique", "unique_exp", "settings",
    )  # fmt: skip
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


def due_at(at_ms: int) -> str:
    """The ``due`` ARGV of an enqueue due at Unix time ``at_ms`` on Redis' clock."""
    return f"@{at_ms}"


# -- claim -----------------------------------------------------------------------------

# a claim reply: now_ms, next_due_ms, now_us, throttle, then id, envelope pairs
_CLAIM_JOBS_AT = 4
PAUSED = -2  # a claim reply's next_due_ms when the queue is paused
UNLIMITED = -1  # a claim reply's throttle when the queue has no rate limit


class ClaimReply:
    """What a claim returned. The jobs stay in the raw reply, decoded straight from
    it in one native call; only this class knows where they start."""

    __slots__ = ("now_ms", "next_due_ms", "now_us", "throttle_ms", "raw")

    def __init__(self, raw: list[Any]) -> None:
        self.raw = raw
        self.now_ms = int(raw[0])
        # earliest due time of a scheduled job, -1 when none is scheduled, or
        # PAUSED (-2): the queue is paused, nothing was claimed; when the rate
        # limit stopped the claim: when its next token is due
        self.next_due_ms = int(raw[1])
        # microseconds of Redis' clock within now_ms (0-999)
        self.now_us = int(raw[2])
        # UNLIMITED (-1): no rate limit; 0: a limit that did not stop this claim;
        # > 0: throttled, nothing claimed until this time (ms, Redis' clock)
        self.throttle_ms = int(raw[3])

    @property
    def paused(self) -> bool:
        """The queue is paused: the claim took nothing, whatever is waiting."""
        return self.next_due_ms == PAUSED

    @property
    def rate_limited(self) -> bool:
        """The queue has a rate limit (the claim took at most what it allowed)."""
        return self.throttle_ms != UNLIMITED

    @property
    def throttled(self) -> bool:
        """The rate limit left no token: nothing claimed, whatever is waiting, until
        ``next_due_ms``."""
        return self.throttle_ms > 0

    @property
    def now_exact_ms(self) -> float:
        """Redis' clock at the claim, to the microsecond, in ms."""
        return self.now_ms + self.now_us / 1000

    def __len__(self) -> int:
        return (len(self.raw) - _CLAIM_JOBS_AT) // 2

    @property
    def ids(self) -> list[bytes]:
        """The ids claimed, in the order they were popped."""
        ids: list[bytes] = self.raw[_CLAIM_JOBS_AT::2]
        return ids

    @property
    def envelopes(self) -> list[bytes]:
        envs: list[bytes] = self.raw[_CLAIM_JOBS_AT + 1 :: 2]
        return envs

    def decode(
        self, registry: Mapping[str, Any]
    ) -> tuple[
        list[tuple[bytes, Any, list[Any], dict[str, Any], int, dict[str, Any]]],
        list[tuple[bytes, str]],
    ]:
        """``codec.decode_claim`` of the jobs: ``(runnable, broken)``."""
        decoded: Any = codec.decode_claim(self.raw, _CLAIM_JOBS_AT, registry)
        return decoded  # type: ignore[no-any-return]


class _Claim(Contract[ClaimReply]):
    keys = (
        "ready", "prio", "jobs", "leases", "scheduled", "held", "stats", "wake", "sched_prio",
        "settings", "broken", "cancelled", "links", "unique", "unique_exp",
    )  # fmt: skip
    argv_names = ("worker_id", "n", "lease_ms", "promote_max")

    def argv(self, worker_id: str, n: int, lease_ms: int, promote_max: int) -> list[Any]:
        return [worker_id, n, lease_ms, promote_max]

    def parse(self, raw: Any) -> ClaimReply:
        return ClaimReply(raw)


# -- ack -------------------------------------------------------------------------------


class _Ack(Contract[int]):
    keys = (
        "jobs",
        "stalls",
        "held",
        "scheduled",
        "dead",
        "broken",
        "stats",
        "poison",
        "sched_prio",
        "cancelled",
        "links",
        "tagged",
        "unique",
        "unique_exp",
    )
    argv_names = ("dead_max_age_ms", "dead_max_len", "n_failed")
    argv_rest = "sections"

    def argv(
        self,
        dead_max_age_ms: int,
        dead_max_len: int,
        n_failed: int,
        done: Sequence[bytes] = (),
        retry: Sequence[tuple[bytes, int, bytes]] = (),
        dead: Sequence[tuple[bytes, bytes]] = (),
        broken: Sequence[tuple[bytes, str]] = (),
    ) -> list[Any]:
        """Four sections, each a count then its records: done ids; retry (id,
        delay_ms, envelope); dead (id, envelope); broken (id, reason)."""
        argv: list[Any] = [dead_max_age_ms, dead_max_len, n_failed]
        argv.append(len(done))
        argv.extend(done)
        argv.append(len(retry))
        for job_id, delay_ms, env in retry:
            argv += (job_id, delay_ms, env)
        argv.append(len(dead))
        for job_id, env in dead:
            argv += (job_id, env)
        argv.append(len(broken))
        for job_id, reason in broken:
            argv += (job_id, reason)
        return argv

    def parse(self, raw: Any) -> int:
        """The number of outcomes applied (the others were stale)."""
        return int(raw)


# -- at-most-once: take, ack_taken ----------------------------------------------------


class _Take(Contract[list[bytes]]):
    keys = ("held", "jobs", "stalls", "links", "tagged", "unique", "unique_exp")
    argv_rest = "ids"

    def argv(self, ids: Iterable[bytes]) -> list[Any]:
        return list(ids)

    def parse(self, raw: Any) -> list[bytes]:
        """The ids taken: those the worker still held."""
        return list(raw)


class _AckTaken(Contract[int]):
    keys = ("jobs", "dead", "broken", "stats", "poison", "ready", "wake")
    argv_names = ("dead_max_age_ms", "dead_max_len", "n_done")
    argv_rest = "sections"

    def argv(
        self,
        dead_max_age_ms: int,
        dead_max_len: int,
        n_done: int,
        dead: Sequence[tuple[bytes, bytes]] = (),
        broken: Sequence[tuple[bytes, str, bytes]] = (),
        back: Sequence[tuple[bytes, bytes]] = (),
    ) -> list[Any]:
        """Three sections, each a count then its records: dead (id, envelope);
        broken (id, reason, envelope); back (id, envelope)."""
        argv: list[Any] = [dead_max_age_ms, dead_max_len, n_done, len(dead)]
        for job_id, env in dead:
            argv += (job_id, env)
        argv.append(len(broken))
        for job_id, reason, env in broken:
            argv += (job_id, reason, env)
        argv.append(len(back))
        for job_id, env in back:
            argv += (job_id, env)
        return argv

    def parse(self, raw: Any) -> int:
        """The number of jobs handed back."""
        return int(raw)


# -- release ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseReply:
    """``moved``: jobs handed back or buried; ``buried``: ``(id, reason)`` of those
    that went dead as poison jobs (stalled more than max_stalls times)."""

    moved: int
    buried: list[tuple[str, str]]

    def log_buried(self, log: logging.Logger, queue: str) -> None:
        """One ERROR line per job buried: a poison job needs a person."""
        for job_id, reason in self.buried:
            log.error("job %s of queue %s is dead: %s", job_id, queue, reason)


class _Release(Contract[ReleaseReply]):
    keys = (
        "ready", "leases", "held", "stats", "wake", "jobs", "dead", "stalls", "poison",
        "cancelled", "links", "tagged", "unique", "unique_exp",
    )  # fmt: skip
    argv_names = ("worker_id", "mode", "max_stalls")
    argv_rest = "ids"

    def argv(
        self, worker_id: str, mode: ReleaseMode, max_stalls: int, ids: Iterable[Any] = ()
    ) -> list[Any]:
        """``ids`` none: every id the worker holds, and its lease is dropped."""
        return [worker_id, mode.value, max_stalls, *ids]

    def parse(self, raw: Any) -> ReleaseReply:
        """``{moved, buried_id1, reason1, ...}``"""
        buried = [(raw[i].decode(), raw[i + 1].decode()) for i in range(1, len(raw) - 1, 2)]
        return ReleaseReply(int(raw[0]), buried)


# -- extend ----------------------------------------------------------------------------


class _Extend(Contract[int]):
    keys = ("leases", "held")
    argv_names = ("worker_id", "lease_ms")

    def argv(self, worker_id: str, lease_ms: int) -> list[Any]:
        return [worker_id, lease_ms]

    def parse(self, raw: Any) -> int:
        """How many jobs the extended lease covers."""
        return int(raw)


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
        "ready", "leases", "jobs", "dead", "stats", "wake", "scheduled", "prio", "poison",
        "sched_prio", "cancelled", "unique", "unique_exp",
    )  # fmt: skip
    argv_names = ("limit", "dead_max_age_ms", "dead_max_len")

    def argv(self, limit: int, dead_max_age_ms: int, dead_max_len: int) -> list[Any]:
        return [limit, dead_max_age_ms, dead_max_len]

    def parse(self, raw: Any) -> ReapReply:
        return ReapReply(int(raw[0]), int(raw[1]), int(raw[2]), [w.decode() for w in raw[3:]])


ENQUEUE = _Enqueue("enqueue")
CLAIM = _Claim("claim")
ACK = _Ack("ack")
RELEASE = _Release("release")
EXTEND = _Extend("extend")
REAP = _Reap("reap")
ALL: tuple[Contract[Any], ...] = (ENQUEUE, CLAIM, ACK, RELEASE, EXTEND, REAP)


# -- fire (periodic jobs) ----------------------------------------------------------------


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


# -- purge -----------------------------------------------------------------------------

PURGE_BATCH_MAX = 5000  # purge.lua refuses more: unpack() is bounded by Lua's stack


class _Purge(Contract[tuple[int, int]]):
    keys = (
        "ready", "prio", "scheduled", "sched_prio", "dead", "poison", "broken", "jobs",
        "stalls", "stats", "links", "tagged", "unique", "unique_exp",
    )  # fmt: skip
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
ALL = (*ALL, FIRE, PURGE)

TAKE = _Take("take")
ACK_TAKEN = _AckTaken("ack_taken")
ALL = (*ALL, TAKE, ACK_TAKEN)

# -- rate_take (per-key rate limits) -------------------------------------------------


class _RateTake(Contract[int]):
    keys = ("rate_state",)
    argv_names = ("rate", "period_ms", "burst")

    def keys_for(self, k: QueueKeys, worker_id: Optional[str] = None) -> list[str]:
        """The KEYS of a take; ``worker_id`` is the formatted rate key here."""
        if worker_id is None:
            raise TypeError(f"{self.name}: its KEYS need a rate key")
        return [k.rate_state(worker_id)]

    def argv(self, rate: int, period_ms: int, burst: int) -> list[Any]:
        return [rate, period_ms, burst]

    def parse(self, raw: Any) -> int:
        """0: the job may start now; else ms until the token reserved for it."""
        return int(raw)


RATE_TAKE = _RateTake("rate_take")
ALL = (*ALL, RATE_TAKE)


# -- cancel ----------------------------------------------------------------------------

CANCEL_BATCH_MAX = 1000  # cancel.lua refuses more: one call stays short


@dataclass(frozen=True)
class CancelReply:
    """``cancelled``: jobs cancelled; ``handled``: ids looked at (by tag: fewer than
    the limit means no entry of the tag is left)."""

    cancelled: int
    handled: int


class _Cancel(Contract[CancelReply]):
    keys = (
        "jobs", "scheduled", "sched_prio", "prio", "dead", "broken", "cancelled", "stalls",
        "stats", "links", "tagged", "unique", "unique_exp",
    )  # fmt: skip
    argv_names = ("tag", "limit")
    argv_rest = "ids"

    def argv(self, tag: str, limit: int, ids: Iterable[Any] = ()) -> list[Any]:
        """A tag (and no ids), or ``tag=""`` and at most ``limit`` ids."""
        return [tag, limit, *ids]

    def parse(self, raw: Any) -> CancelReply:
        return CancelReply(int(raw[0]), int(raw[1]))


CANCEL = _Cancel("cancel")
ALL = (*ALL, CANCEL)


# -- revive (fastq dead retry, fastq broken retry) --------------------------------------

REVIVE_BATCH_MAX = 500  # jobs per revive call: one call stays short


class ReviveSection(str, Enum):
    """Where ``revive`` takes its jobs from."""

    DEAD = "dead"
    BROKEN = "broken"


class _Revive(Contract[int]):
    keys = ("jobs", "dead", "poison", "broken", "stalls", "ready", "prio", "stats", "wake")
    argv_names = ("section",)
    argv_rest = "jobs"

    def argv(self, section: ReviveSection, jobs: Iterable[tuple[str, bytes, int]]) -> list[Any]:
        """``jobs``: (id, envelope to queue, priority) of each job to revive."""
        return [section.value, *(part for job in jobs for part in job)]

    def parse(self, raw: Any) -> int:
        """Jobs revived (those no longer in the section, or without an envelope, are not)."""
        return int(raw)


REVIVE = _Revive("revive")
ALL = (*ALL, REVIVE)
