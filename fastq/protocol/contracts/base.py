"""The base of every script's contract: its KEYS by name, its ARGV, its reply, and
the script it binds (loaded by name from ``fastq/protocol/lua/``).

Each contract registers itself as it is declared, so the list of fastq's scripts
is the list of their contracts (:data:`fastq.protocol.contracts.ALL`), and a script
is declared once.
"""

from __future__ import annotations

from typing import Any, Generic, Optional, Sequence, TypeVar

import redis

from fastq.protocol import scripts
from fastq.protocol.keys import QueueKeys

R = TypeVar("R")

# the keys of one worker, not of the whole queue: ``QueueKeys`` methods of a worker id
_PER_WORKER = frozenset({"held", "taken_seq", "epoch"})

# every contract declared, by its script's name, in the order declared
_DECLARED: dict[str, Contract[Any]] = {}


class Contract(Generic[R]):
    """One script's declaration. Subclasses add ``argv(...)`` and ``parse(raw)``.

    Attributes:
        script: the loaded script.
        keys: its KEYS, in order, as attribute names of ``key_space`` (``QueueKeys``,
            or ``BatchKeys`` for a batch's own scripts); ``keys_rest``
            names a variadic tail (the caller appends it to ``keys_for``).
        argv_names: its fixed ARGV, in order; ``argv_rest`` names the variadic tail.
    """

    keys: tuple[str, ...] = ()
    # the class whose attributes ``keys`` names: a queue's keys, or a batch's
    key_space: type = QueueKeys
    # a variadic tail of KEYS (the held sets of several workers), named as ``keys``
    keys_rest: Optional[str] = None
    argv_names: tuple[str, ...] = ()
    argv_rest: Optional[str] = None

    def __init__(self, name: str) -> None:
        if name in _DECLARED:
            raise ValueError(f"the contract of the {name} script is declared twice")
        self.script = scripts.load(name)
        _DECLARED[name] = self

    @property
    def name(self) -> str:
        return self.script.name

    def keys_for(self, k: Any, worker_id: Optional[str] = None) -> list[str]:
        """The KEYS of a call on ``k``'s queue (for ``worker_id`` if it holds leases).
        Precompute them where a call is repeated: this is not free."""
        out = []
        for attr in self.keys:
            if attr in _PER_WORKER:
                if worker_id is None:
                    raise TypeError(f"{self.name}: its KEYS need a worker id")
                out.append(getattr(k, attr)(worker_id))
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


def declared() -> tuple[Contract[Any], ...]:
    """Every contract declared so far, in the order declared."""
    return tuple(_DECLARED.values())
