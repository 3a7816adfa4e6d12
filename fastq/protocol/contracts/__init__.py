"""The contract of each Lua script, declared once: its KEYS, its ARGV, its reply.

A declaration names its script's KEYS by ``QueueKeys`` attribute (``held`` takes
the worker id), builds its ARGV from named parameters and parses its reply into
a typed value. Nothing else in fastq knows a KEYS order, an ARGV layout or the
position of a field in a reply; ``tests/lua/test_contracts.py`` checks every
script's header against its declaration, and that every script of
``fastq/protocol/lua/`` has one.

The contracts are grouped by who calls them: the producer's (:mod:`.producer`), the
worker's (:mod:`.worker`), the reaper's (:mod:`.reaper`), an operator's
(:mod:`.admin`), the read side's (:mod:`.reader`); each registers itself
(:mod:`.base`), and :data:`ALL` is the list of fastq's scripts.
"""

from __future__ import annotations

from typing import Any

from fastq.protocol.contracts.admin import (
    CANCEL,
    CANCEL_BATCH_MAX,
    DELETE,
    FOLD,
    GROUP_PAUSE,
    PURGE,
    PURGE_BATCH_MAX,
    REVIVE,
    REVIVE_BATCH_MAX,
    CancelReply,
    ReviveSection,
)
from fastq.protocol.contracts.base import Contract, declared
from fastq.protocol.contracts.batches import (
    BATCH_CLOSE,
    BATCH_JOIN,
    BATCH_OPEN,
    BATCH_SEAL,
    BATCH_SETTLE,
    CloseReply,
    SettleReply,
)
from fastq.protocol.contracts.producer import (
    ENQUEUE,
    UNIQUE_MODES,
    EnqueueReply,
    due_at,
    enqueue_extras,
)
from fastq.protocol.contracts.reader import (
    JOB_INFO,
    JOB_INFO_VERSION,
    JobInfoReply,
)
from fastq.protocol.contracts.reaper import FIRE, REAP, FireOutcome, FireReply, ReapReply
from fastq.protocol.contracts.worker import (
    ACK,
    ACK_TAKEN,
    CIRCUIT_CHECK,
    CIRCUIT_REPORT,
    CLAIM,
    EXTEND,
    PAUSED,
    RATE_REST,
    RATE_TAKE,
    RELEASE,
    TAKE,
    UNLIMITED,
    ClaimReply,
    ReleaseMode,
    ReleaseReply,
    is_stale,
    recorded_epoch,
)

# Every contract, so every script fastq loads, by name: built once, here, where
# every group above has registered its own.
ALL: tuple[Contract[Any], ...] = tuple(sorted(declared(), key=lambda contract: contract.name))
NAMES: tuple[str, ...] = tuple(contract.name for contract in ALL)
BY_NAME: dict[str, Contract[Any]] = {contract.name: contract for contract in ALL}

__all__ = [
    "ACK",
    "ACK_TAKEN",
    "ALL",
    "BATCH_CLOSE",
    "BATCH_JOIN",
    "BATCH_OPEN",
    "BATCH_SEAL",
    "BATCH_SETTLE",
    "CloseReply",
    "SettleReply",
    "BY_NAME",
    "CANCEL",
    "CIRCUIT_CHECK",
    "CIRCUIT_REPORT",
    "CANCEL_BATCH_MAX",
    "CLAIM",
    "ENQUEUE",
    "EXTEND",
    "FIRE",
    "FOLD",
    "GROUP_PAUSE",
    "JOB_INFO",
    "JOB_INFO_VERSION",
    "NAMES",
    "PAUSED",
    "PURGE",
    "PURGE_BATCH_MAX",
    "RATE_REST",
    "RATE_TAKE",
    "REAP",
    "DELETE",
    "RELEASE",
    "REVIVE",
    "REVIVE_BATCH_MAX",
    "TAKE",
    "UNIQUE_MODES",
    "UNLIMITED",
    "CancelReply",
    "ClaimReply",
    "Contract",
    "EnqueueReply",
    "FireOutcome",
    "FireReply",
    "JobInfoReply",
    "ReapReply",
    "ReleaseMode",
    "ReleaseReply",
    "ReviveSection",
    "due_at",
    "enqueue_extras",
    "is_stale",
    "recorded_epoch",
]
