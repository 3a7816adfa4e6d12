"""The batches' verbs (``fastq.protocol.batches``): ``batch_open``, ``batch_join``,
``batch_close`` and ``batch_settle`` on a batch's own hash, ``batch_seal`` on one
queue's share of it. The scripts that end jobs count them into the shares
(``lua/lib/batches.lua``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from fastq.protocol.contracts.base import Contract
from fastq.protocol.keys import BatchKeys


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _BatchOpen(Contract[tuple[bool, str]]):
    key_space = BatchKeys
    keys = ("batch",)
    argv_names = ("ttl_ms", "description", "callbacks", "parent")

    def argv(self, ttl_ms: int, description: str, callbacks: bytes, parent: str) -> list[Any]:
        return [ttl_ms, description, callbacks, parent]

    def parse(self, raw: Any) -> tuple[bool, str]:
        """(created by this call, its state)."""
        return bool(int(raw[0])), _text(raw[1])


class _BatchJoin(Contract[str]):
    key_space = BatchKeys
    keys = ("batch",)
    argv_names = ("member", "ttl_ms")

    def argv(self, member: str, ttl_ms: int) -> list[Any]:
        return [member, ttl_ms]

    def parse(self, raw: Any) -> str:
        """The batch's state: 'open' once joined; else why not ('' for none)."""
        return _text(raw)


@dataclass(frozen=True)
class CloseReply:
    state: str  # '' for no such batch
    cancelled: bool
    members: tuple[str, ...]  # 'q:<queue>', 'k:<batch>'


class _BatchClose(Contract[CloseReply]):
    key_space = BatchKeys
    keys = ("batch",)
    argv_names = ("cancel",)

    def argv(self, cancel: bool) -> list[Any]:
        return [int(cancel)]

    def parse(self, raw: Any) -> CloseReply:
        if not _text(raw[0]):
            return CloseReply("", False, ())
        return CloseReply(_text(raw[0]), bool(int(raw[1])), tuple(_text(m) for m in raw[2:]))


@dataclass(frozen=True)
class SettleReply:
    """What ``batch_settle`` said: ``state`` is '' (no such batch), 'open', 'closed',
    'fired' (ended, its callbacks enqueued), or 'fire': ended, enqueue its callbacks
    (the other fields are then set)."""

    state: str
    counts: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # total, done, dead, cancelled, failed
    cancelled: bool = False
    callbacks: bytes = b""
    parent: str = ""
    description: str = ""
    opened_ms: int = 0
    ended_ms: int = 0


class _BatchSettle(Contract[SettleReply]):
    key_space = BatchKeys
    keys = ("batch",)
    argv_names = ("keep_ms", "fired")
    argv_rest = "reports"

    def argv(self, keep_ms: int, fired: bool, reports: Sequence[tuple[str, str]] = ()) -> list[Any]:
        """``reports``: (member, counts) pairs, as the script says."""
        argv: list[Any] = [keep_ms, int(fired)]
        for member, counts in reports:
            argv += (member, counts)
        return argv

    def parse(self, raw: Any) -> SettleReply:
        state = _text(raw[0])
        if state != "fire":
            return SettleReply(state)
        counts = tuple(int(v) for v in raw[1:6])
        return SettleReply(
            state,
            counts,  # type: ignore[arg-type]
            bool(int(raw[6])),
            bytes(raw[7]) if raw[7] else b"",
            _text(raw[8]),
            _text(raw[9]),
            int(raw[10]),
            int(raw[11]),
        )


class _BatchSeal(Contract[Optional[str]]):
    keys = ("batches", "batches_due")
    argv_names = ("batch", "mode")

    def argv(self, batch: str, mode: str) -> list[Any]:
        """``mode``: 'open', 'read', 'seal', 'cancel' or 'drop'."""
        return [batch, mode]

    def parse(self, raw: Any) -> Optional[str]:
        """The share's counts (None: the queue has no share of the batch)."""
        return _text(raw) or None


BATCH_OPEN = _BatchOpen("batch_open")
BATCH_JOIN = _BatchJoin("batch_join")
BATCH_CLOSE = _BatchClose("batch_close")
BATCH_SETTLE = _BatchSettle("batch_settle")
BATCH_SEAL = _BatchSeal("batch_seal")
