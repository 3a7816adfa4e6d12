"""What Redis keeps of periodic jobs beside ``fire.lua``: the last slot each fired
(its queue's ``periodic`` hash) and the id of its last run (``periodic_run``)."""

from __future__ import annotations

from typing import Optional

import redis

from fastq.connection.typed import sync_reply
from fastq.protocol.keys import NamespaceKeys, QueueKeys


def load_slots(
    client: redis.Redis, namespace: str, jobs: list[tuple[QueueKeys, str]]
) -> list[Optional[int]]:
    """The last slot fired (Unix ms; None: never) of each (queue, job name), with
    their queues made known to the namespace (for ``fastq stats`` and other
    reapers), in one round trip: a firer's start."""
    pipe = client.pipeline(transaction=False)
    for keys, name in jobs:
        pipe.hget(keys.periodic, name)
    pipe.sadd(NamespaceKeys(namespace).queues, *{keys.queue for keys, _ in jobs})
    replies = sync_reply(pipe.execute())
    return [int(last) if last is not None else None for last in replies[: len(jobs)]]


def last_fired(
    client: redis.Redis, jobs: list[tuple[QueueKeys, str]]
) -> list[tuple[Optional[int], Optional[str]]]:
    """The last slot fired and the id of its run, of each (queue, job name), in one
    round trip (None, None: it never fired)."""
    pipe = client.pipeline(transaction=False)
    for keys, name in jobs:
        pipe.hget(keys.periodic, name)
        pipe.hget(keys.periodic_run, name)
    replies = sync_reply(pipe.execute())
    out: list[tuple[Optional[int], Optional[str]]] = []
    for i in range(len(jobs)):
        slot, run = replies[2 * i], replies[2 * i + 1]
        out.append(
            (int(slot) if slot is not None else None, run.decode() if run is not None else None)
        )
    return out
