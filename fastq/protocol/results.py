"""Kept return values (``@app.job(result_ttl_s=...)``): encoding them in the worker
and waiting for them in ``app.result()``; and the progress running jobs report.

A job's result lives at ``result:<id>`` (a string, with the TTL) and its arrival is
announced on ``result_ready:<id>`` (a list, same TTL), which a waiter blocks on
with ``BLPOP``. A waiter that wakes puts the token back for the next one. A job
that dies pushes no token, so a waiter also looks at the job's state between
blocks that grow from ``FIRST_BLOCK_S`` to ``MAX_BLOCK_S``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from fastq.connection.cluster import is_cluster
from fastq.connection.typed import sync_reply, unchecked
from fastq.errors import JobFailed, NoResult, ResultNotSerializable, ResultTimeout
from fastq.protocol.introspect import get_job
from fastq.protocol.keys import QueueKeys
from fastq.validate import MAX_RESULT_BYTES

FIRST_BLOCK_S = 0.05
MAX_BLOCK_S = 1.0


def encode_result(value: Any) -> bytes:
    """The JSON of a job's return value.

    Raises:
        ResultNotSerializable: JSON cannot encode it (NaN and infinities included:
            orjson would write them as null), or it is above ``MAX_RESULT_BYTES``.
    """
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ResultNotSerializable(
            f"the job's return value cannot be kept as JSON (result_ttl_s): {exc}"
        ) from None
    encoded = text.encode()
    if len(encoded) > MAX_RESULT_BYTES:
        raise ResultNotSerializable(
            f"the job's return value is {len(encoded)} bytes as JSON, more than "
            f"MAX_RESULT_BYTES={MAX_RESULT_BYTES}"
        )
    return encoded


def store_commands(
    keys: QueueKeys, job_id: bytes, encoded: bytes, ttl_ms: int
) -> list[tuple[Any, ...]]:
    """The Redis commands that keep one result and wake its waiters."""
    shown = job_id.decode()
    ready = keys.result_ready(shown)
    return [
        ("SET", keys.result(shown), encoded, "PX", ttl_ms),
        ("DEL", ready),
        ("RPUSH", ready, b"1"),
        ("PEXPIRE", ready, ttl_ms),
    ]


def wait_for_result(
    client: redis.Redis, candidates: list[QueueKeys], job_id: str, timeout_s: float
) -> Any:
    """Block until the job's result is there, and return it.

    Raises:
        JobFailed: the job is dead or broken.
        NoResult: the job is gone and left no result.
        ResultTimeout: ``timeout_s`` passed first.
    """
    deadline = time.monotonic() + timeout_s
    block_s = FIRST_BLOCK_S
    while True:
        alive: list[QueueKeys] = []
        for keys in candidates:
            # the state first: a worker keeps a result before it deletes the job,
            # so a job found gone here has its result there already
            info = get_job(client, keys, job_id)
            raw = sync_reply(client.get(keys.result(job_id)))
            if raw is not None:
                return json.loads(raw)
            if info is None or info.state in ("cancelled", "done"):
                continue
            if info.state in ("dead", "broken"):
                error = info.last_error if info.state == "dead" else info.broken_reason
                raise JobFailed(job_id, info.state, error, info.traceback)
            alive.append(keys)
        if not alive:
            raise NoResult(
                f"job {job_id} is gone without a result: an unknown id, a cancelled "
                "job, a job without result_ttl_s, or its result expired"
            )
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise ResultTimeout(f"job {job_id} did not finish within {timeout_s:g} s")
        # the queues where the job lives (one, unless an id is reused); on a cluster
        # one BLPOP takes keys of one slot: the first queue's, the others looked at
        # between blocks
        ready = [k.result_ready(job_id) for k in alive[: 1 if is_cluster(client) else None]]
        popped = sync_reply(client.blpop(ready, timeout=min(left_s, block_s)))
        if popped is not None:
            _pass_on(client, popped[0])
        block_s = min(block_s * 2, MAX_BLOCK_S)


def _pass_on(client: redis.Redis, ready_key: Any) -> None:
    """Put the token back for any other waiter of the same job; it lives a minute
    (the result itself keeps its own TTL)."""
    pipe = client.pipeline(transaction=True)
    pipe.rpush(ready_key, b"1")
    pipe.pexpire(ready_key, TOKEN_PUT_BACK_TTL_MS)
    pipe.execute()


TOKEN_PUT_BACK_TTL_MS = 60_000


def send_progress(
    client: redis.Redis,
    queues: list[QueueKeys],
    latest: dict[str, dict[bytes, bytes]],
    ttl_ms: int,
) -> None:
    """Write the latest progress reports of running jobs (queue -> job id -> report)
    into each queue's progress hash, in one round trip (on a cluster, ``queues`` on
    one node)."""
    pipe = client.pipeline(transaction=False)
    for k in queues:
        # a dict[bytes, bytes] is not the Mapping[FieldT, ...] redis-py 8 asks for (a
        # mapping's keys are invariant)
        pipe.hset(k.progress, mapping=unchecked(latest[k.queue]))
        # the reports of a worker that died are deleted by no one: the hash goes once
        # no worker reported for a while
        pipe.pexpire(k.progress, ttl_ms)
    pipe.execute()
