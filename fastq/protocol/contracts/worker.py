"""The worker's verbs: ``claim``, ``ack``, ``release``, ``extend`` (a round trip
and its leases), ``take`` and ``ack_taken`` (at-most-once jobs), ``rate_take``
(per-key rate limits)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Mapping, Optional, Sequence, TypeVar

import redis

from fastq._accel import codec
from fastq.protocol.contracts.base import Contract
from fastq.protocol.keys import NamespaceKeys, QueueKeys


class ReleaseMode(str, Enum):
    """How ``release`` hands a worker's leased jobs back to the front of the queue."""

    UNSTARTED = "unstarted"  # claimed, never run; nothing counted
    ORPHANED = "orphaned"  # held by a worker that died, not the job it ran; counted
    STALLED = "stalled"  # the job its worker died or hung running: counts a stall
    EXPIRED = "expired"  # a reaper's take-back of a lapsed lease; counts a stall
    INTERRUPTED = "interrupted"  # the job in hand at an operator's hard stop; no stall


# -- epochs ----------------------------------------------------------------------------

# How claim, ack and extend refuse a call carrying an older epoch than its worker's
# recorded one (``lua/lib/epoch.lua``): an error reply "STALE epoch <sent> < <recorded>: ...".
STALE = "STALE"


def is_stale(exc: BaseException) -> bool:
    """Was a call refused as one of a request its worker had given up on (its epoch
    older than recorded)? Such a call changed nothing."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(STALE)


def recorded_epoch(exc: BaseException) -> int:
    """The epoch recorded in Redis that a refused call (``is_stale``) was older than."""
    return int(str(exc).split(":", 1)[0].rsplit(" ", 1)[-1])


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
        self, registry: Mapping[str, Any], batched: Optional[dict[bytes, str]] = None
    ) -> tuple[
        list[tuple[bytes, Any, list[Any], dict[str, Any], int, dict[str, Any]]],
        list[tuple[bytes, str]],
        list[tuple[bytes, str, dict[str, Any]]],
    ]:
        """``codec.decode_claim`` of the jobs: ``(runnable, broken, unknown)``;
        ``batched`` learns the batch of each job in one (id -> batch id)."""
        decoded: Any = codec.decode_claim(self.raw, _CLAIM_JOBS_AT, registry, batched)
        return decoded  # type: ignore[no-any-return]


class _Claim(Contract[ClaimReply]):
    keys = (
        "ready",
        "prio",
        "jobs",
        "leases",
        "scheduled",
        "held",
        "stats",
        "wake",
        "sched_prio",
        "settings",
        "broken",
        "cancelled",
        "links",
        "unique",
        "unique_exp",
        "epoch",
        "group_ready",
        "group_ring",
    )
    argv_names = ("worker_id", "n", "lease_ms", "promote_max", "epoch")

    def argv(
        self, worker_id: str, n: int, lease_ms: int, promote_max: int, epoch: int = 0
    ) -> list[Any]:
        """``epoch``: the worker's (see ``is_stale``)."""
        return [worker_id, n, lease_ms, promote_max, epoch]

    def parse(self, raw: Any) -> ClaimReply:
        return ClaimReply(raw)


CLAIM = _Claim("claim")


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
        # the records of jobs that ended (lib/records.lua), and stale outcomes counted
        "settings",
        "records",
        "records_old",
        "stale",
        "epoch",
        "history",  # jobs done and failed by 10-second slot (lib/history.lua)
        # the batches of its jobs, counted as they end (lib/batches.lua)
        "batched",
        "batches",
        "batches_due",
        # the rest of the chains of its jobs: moved out for forwarding (lib/chains.lua)
        "chained",
        "chain_out",
    )
    argv_names = ("dead_max_age_ms", "dead_max_len", "n_failed", "worker_id", "epoch", "batches")
    argv_rest = "sections"

    def argv(
        self,
        dead_max_age_ms: int,
        dead_max_len: int,
        n_failed: int,
        worker_id: str = "",
        epoch: int = 0,
        batches: Sequence[tuple[str, int]] = (),
        done: Sequence[bytes] = (),
        retry: Sequence[tuple[bytes, int, bytes]] = (),
        dead: Sequence[tuple[bytes, bytes]] = (),
        broken: Sequence[tuple[bytes, str]] = (),
        runs: Optional[bytes] = None,
    ) -> list[Any]:
        """Four sections, each a count then its records: done ids; retry (id,
        delay_ms, envelope); dead (id, envelope); broken (id, reason).
        ``worker_id``: the worker that ran them, named in their records ('': not
        known); its stale outcomes are counted once per job. ``epoch``: the
        worker's (see ``is_stale``). ``runs``: the done jobs' run times and
        attempts for their records (``codec.encode_runs``; None: not known).
        ``batches``: (batch id, n) of the first done ids, in order: the first n of
        that batch (their envelopes' ``b``), counted for it with no lookup; the
        done ids after them are looked up."""
        groups = " ".join(f"{n} {batch_id}" for batch_id, n in batches)
        argv: list[Any] = [dead_max_age_ms, dead_max_len, n_failed, worker_id, epoch, groups]
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
        if runs is not None:
            argv.append(runs)
        return argv

    def parse(self, raw: Any) -> int:
        """The number of outcomes applied (the others were stale)."""
        return int(raw[0]) if isinstance(raw, list) else int(raw)

    @staticmethod
    def has_follow_ups(raw: Any) -> bool:
        """Did the ack leave batches to settle or chains to forward (a reply longer
        than its count)? The rest is read by ``batches_ended`` and ``chains_moved``."""
        return isinstance(raw, list) and len(raw) > 1

    @staticmethod
    def batches_ended(raw: Any) -> list[str]:
        """The batches whose sealed share on this queue the ack ended: to settle."""
        if not isinstance(raw, list):
            return []
        out = []
        for b in raw[1:]:
            if not b:  # the links of chains follow
                break
            out.append(b.decode())
        return out

    @staticmethod
    def chains_moved(raw: Any) -> list[str]:
        """The links done whose chain goes on (its rest now in the queue's
        ``chain_out``): to forward."""
        if not isinstance(raw, list) or b"" not in raw:
            return []
        return [i.decode() for i in raw[raw.index(b"") + 1 :]]


ACK = _Ack("ack")


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
        "ready",
        "leases",
        "held",
        "stats",
        "wake",
        "jobs",
        "dead",
        "stalls",
        "poison",
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
        "batches_due",
        "chained",
        "epoch",
        "group_ready",
        "group_ring",
    )
    argv_names = ("worker_id", "mode", "max_stalls", "cause", "epoch")
    argv_rest = "ids"

    def argv(
        self,
        worker_id: str,
        mode: ReleaseMode,
        max_stalls: int,
        cause: str = "",
        epoch: Optional[int] = None,
        ids: Iterable[Any] = (),
    ) -> list[Any]:
        """``ids`` none: every id the worker holds, and its lease is dropped.
        ``cause``: how the worker died (``"was killed by SIGSEGV"``), if known:
        a job buried as poison says so. ``epoch``: the worker's, on its own call
        (see ``is_stale``); None on a call for it by another (its master, a reaper)."""
        return [worker_id, mode.value, max_stalls, cause, "" if epoch is None else epoch, *ids]

    def parse(self, raw: Any) -> ReleaseReply:
        """``{moved, buried_id1, reason1, ...}``"""
        buried = [(raw[i].decode(), raw[i + 1].decode()) for i in range(1, len(raw) - 1, 2)]
        return ReleaseReply(int(raw[0]), buried)


RELEASE = _Release("release")


# -- extend ----------------------------------------------------------------------------


class _Extend(Contract[int]):
    keys = ("leases", "held", "epoch")
    argv_names = ("worker_id", "lease_ms", "epoch")

    def argv(self, worker_id: str, lease_ms: int, epoch: int = 0) -> list[Any]:
        """``epoch``: the worker's (see ``is_stale``)."""
        return [worker_id, lease_ms, epoch]

    def parse(self, raw: Any) -> int:
        """How many jobs the extended lease covers."""
        return int(raw)


EXTEND = _Extend("extend")


# -- at-most-once: take, ack_taken -----------------------------------------------------


class _Take(Contract[list[bytes]]):
    keys = ("held", "jobs", "stalls", "links", "tagged", "unique", "unique_exp")
    argv_rest = "ids"

    def argv(self, ids: Iterable[bytes]) -> list[Any]:
        return list(ids)

    def parse(self, raw: Any) -> list[bytes]:
        """The ids taken: those the worker still held."""
        return list(raw)


TAKE = _Take("take")


class _AckTaken(Contract[int]):
    keys = (
        "jobs",
        "dead",
        "broken",
        "stats",
        "poison",
        "ready",
        "wake",
        "taken_seq",
        "settings",
        "records",
        "records_old",
        "history",
        "batched",
        "batches",
        "batches_due",
        "chained",
        "chain_out",
    )
    argv_names = ("dead_max_age_ms", "dead_max_len")
    argv_rest = "sections"

    def argv(
        self,
        dead_max_age_ms: int,
        dead_max_len: int,
        done: Sequence[tuple[int, int]] = (),
        dead: Sequence[tuple[bytes, bytes]] = (),
        broken: Sequence[tuple[bytes, str, bytes]] = (),
        back: Sequence[tuple[bytes, bytes]] = (),
        done_ids: Sequence[bytes] = (),
        runs: Optional[bytes] = None,
    ) -> list[Any]:
        """Five sections, each a count then its records: done (seq, n: a part of
        the worker's successes, numbered as they were settled, so that a resent
        part counts once); dead (id, envelope); broken (id, reason, envelope);
        back (id, envelope); done_ids (id: each success, recorded). ``runs``: the
        run times and attempts of ``done_ids`` (as ACK's)."""
        argv: list[Any] = [dead_max_age_ms, dead_max_len, len(done)]
        for seq, n in done:
            argv += (seq, n)
        argv.append(len(dead))
        for job_id, env in dead:
            argv += (job_id, env)
        argv.append(len(broken))
        for job_id, reason, env in broken:
            argv += (job_id, reason, env)
        argv.append(len(back))
        for job_id, env in back:
            argv += (job_id, env)
        argv.append(len(done_ids))
        argv.extend(done_ids)
        if runs is not None:
            argv.append(runs)
        return argv

    def parse(self, raw: Any) -> int:
        """The number of jobs handed back."""
        return int(raw)


ACK_TAKEN = _AckTaken("ack_taken")


# -- rate_take (per-key rate limits) ---------------------------------------------------


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


class _RateRest(Contract[bool]):
    keys = ("rate_state",)
    argv_names = ("rest_ms",)

    def keys_for(self, k: QueueKeys, worker_id: Optional[str] = None) -> list[str]:
        """The KEYS of a rest; ``worker_id`` is the formatted rate key here."""
        if worker_id is None:
            raise TypeError(f"{self.name}: its KEYS need a rate key")
        return [k.rate_state(worker_id)]

    def argv(self, rest_ms: int) -> list[Any]:
        return [rest_ms]

    def parse(self, raw: Any) -> bool:
        """Whether the key's state moved on (False: it rested that long already)."""
        return bool(int(raw))


RATE_REST = _RateRest("rate_rest")


# -- circuit_check, circuit_report (circuit breakers) ------------------------------------


_R = TypeVar("_R")


class _CircuitCall(Contract[_R]):
    keys = ("circuit",)
    key_space = NamespaceKeys  # a circuit is no queue's: one for every queue

    def keys_for(self, k: Any, worker_id: Optional[str] = None) -> list[str]:
        """The KEYS of a call: ``k`` the namespace's keys, ``worker_id`` the
        formatted circuit key."""
        if worker_id is None:
            raise TypeError(f"{self.name}: its KEYS need a circuit key")
        return [k.circuit(worker_id)]


class _CircuitCheck(_CircuitCall[int]):
    argv_names = ("probe_ms", "open_ms")

    def argv(self, probe_ms: int, open_ms: int) -> list[Any]:
        return [probe_ms, open_ms]

    def parse(self, raw: Any) -> int:
        """0: the job may start (closed, or it probes); else the ms it waits."""
        return int(raw)


class _CircuitReport(_CircuitCall[tuple[str, int]]):
    argv_names = ("failures", "open_ms", "outcomes")

    def argv(self, failures: int, open_ms: int, outcomes: str) -> list[Any]:
        return [failures, open_ms, outcomes]

    def parse(self, raw: Any) -> tuple[str, int]:
        """('opened', its pause in ms), ('closed', 0) or ('', 0)."""
        transition = raw[0].decode() if isinstance(raw[0], bytes) else str(raw[0])
        return transition, int(raw[1])


CIRCUIT_CHECK = _CircuitCheck("circuit_check")
CIRCUIT_REPORT = _CircuitReport("circuit_report")
