"""A worker's wire to Redis: how its round trips go out and come back, and how it
waits for work, chosen once when its round trip is built
(:func:`fastq.worker.wire.wire_for`).

:class:`fastq.worker.wire.node.OneWire` is one Redis (or a Sentinel-managed
master): a whole round trip is one write on one connection of the worker's own, its
replies read in order. On a Redis Cluster the same round trip is a fan-out of
per-node sub-requests (:class:`fastq.worker.wire.cluster.NodeWire`). Both give the
round trip (:mod:`fastq.worker.roundtrip`) the same calls, so the worker loop never
learns which it runs on:

- ``write(commands)``: send, without waiting, a request's commands;
- ``read(n)``: the ``n`` replies of the oldest request written and not read, in
  the order its commands were given; a command's error reply is returned in its
  place, a lost connection raised (the replies are lost with it);
- ``replied()``: has the reply of the oldest request begun to arrive (no read);
- ``wait_replied(timeout_s)``: wait that long at most for it to (True: it did, or
  the connection failed: the read that follows says how);
- ``load_scripts()``: load the Lua scripts where the wire's requests go;
- ``wait_for_work(timeout_s)``: block until a wake-up token comes on one of the
  queues' wake lists, or the timeout passes (both wires by :func:`wait_until`,
  each with its own BLPOP and LMPOP);
- ``may_hold_leases``: a claim went out (or may have);
- ``client``: the worker's client for what is not a round trip (``take``, the rate
  keys); on a cluster made at its first use (it connects as it is made, and a
  worker must boot while the cluster is away), so reading it may raise.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

import redis

from fastq.protocol import scripts
from fastq.protocol.contracts import CLAIM

# Redis ends a BLPOP whose timeout ran out only on a tick of its own clock (every
# 1/hz s, 100 ms by default; measured: a 1 ms BLPOP returns after ~100 ms). So a
# worker sleeping until a due job blocks until this long before it, and sleeps the
# rest itself, looking for a wake-up token every WAKE_POLL_S.
BLPOP_OVERSHOOT_S = 0.15
WAKE_POLL_S = 0.005
# An idle wait's command whose reply is this late (past the BLPOP's own timeout)
# means Redis is out of reach or stalled: the wait raises, so that the worker says so
# at once, not when its socket times out (a lease later).
NO_REPLY_S = 2.0


def no_reply(waited_s: float) -> redis.TimeoutError:
    """The error of an idle wait's command that got no reply in ``waited_s``."""
    return redis.TimeoutError(f"no reply for {waited_s:.3g} s")


class Wire(Protocol):
    # Do all of a request's commands see one Redis clock (one TIME serves them all)?
    one_clock: bool
    may_hold_leases: bool

    @property
    def client(self) -> redis.Redis: ...

    def write(self, commands: list[scripts.Command]) -> None: ...

    def read(self, n: int) -> list[Any]: ...

    def replied(self) -> bool: ...

    def wait_replied(self, timeout_s: float) -> bool: ...

    def load_scripts(self) -> None: ...

    def wait_for_work(self, timeout_s: float) -> bool: ...

    def close(self) -> None: ...


def has_claim(commands: list[scripts.Command]) -> bool:
    return any(c[0] is CLAIM.script for c in commands)


def wait_until(deadline: float, block: Callable[[float], bool], poll: Callable[[], bool]) -> bool:
    """A wire's idle wait, to the ``deadline`` (monotonic) within a millisecond:
    ``block(blocking_s)`` (BLPOPs on the wake lists, True once one brings a token)
    until BLPOP_OVERSHOOT_S before it, then ``poll()`` (LMPOPs, True once one brings
    a token) every WAKE_POLL_S to it. Returns whether a token came."""
    blocking_s = deadline - time.monotonic() - BLPOP_OVERSHOOT_S
    if blocking_s > 0 and block(blocking_s):
        return True
    while True:
        if poll():
            return True
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return False
        time.sleep(min(left_s, WAKE_POLL_S))
        if left_s <= WAKE_POLL_S:  # slept to the deadline: the claim follows at once
            return False
