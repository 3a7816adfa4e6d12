"""The worker's round trip on the wire: one Redis node, or a Redis Cluster's nodes
(the contract both keep: :mod:`fastq.worker.wire.base`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import redis

from fastq.worker.wire.base import Wire
from fastq.worker.wire.node import OneWire

__all__ = ["Wire", "wire_for"]


def wire_for(
    connect: Callable[[], redis.Redis], wake_keys: Sequence[str], *, cluster: bool
) -> Wire:
    """The wire of the clients ``connect`` makes: per node on a cluster, else one
    connection. ``wake_keys``: the wake lists of the worker's queues."""
    if cluster:
        from fastq.worker.wire.cluster import NodeWire  # only a cluster's workers need it

        return NodeWire(connect, wake_keys)
    return OneWire(connect(), wake_keys)
