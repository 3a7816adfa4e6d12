"""Putting dead and broken jobs back in their queue (``fastq dead retry``,
``fastq broken retry``): each as a new run of the same id, its attempts reset."""

from __future__ import annotations

from typing import Any, Optional

import orjson
import redis

from fastq.connection.typed import hash_page
from fastq.protocol.contracts import REVIVE, REVIVE_BATCH_MAX, ReviveSection
from fastq.protocol.keys import QueueKeys
from fastq.validate import BATCH_FIELD, SLOT_FIELD

# what a failed run wrote into the envelope: a new run starts without it (and with a
# new grace period for a job name no worker knew: fastq.worker.unknown.UNKNOWN_SINCE);
# and its batch ("b"), which counted its end: a new run is outside it
_RUN_FIELDS = (
    "attempts",
    "error",
    "traceback",
    "failed_at",
    SLOT_FIELD,
    "unknown_since",
    BATCH_FIELD,
)


def fresh_envelope(raw: bytes) -> tuple[bytes, int]:
    """``(envelope, priority)`` of a new run of the job ``raw`` describes: the fields
    of its failed runs dropped, its format kept. A payload that is not a valid
    envelope is returned as it is (priority 0): it runs, or is broken again, as is."""
    try:
        env: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw, 0
    if isinstance(env, list) and len(env) == 4 and isinstance(env[3], dict):
        more = {k: v for k, v in env[3].items() if k not in _RUN_FIELDS}
        priority = more.get("p", 0)
        body = orjson.dumps([*env[:3], more] if more else env[:3])
    elif isinstance(env, dict):  # the object of the format before
        body = orjson.dumps({k: v for k, v in env.items() if k not in _RUN_FIELDS})
        priority = env.get("priority", 0)
    else:
        return raw, 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = 0
    return body, priority


def _page(
    client: redis.Redis, keys: QueueKeys, section: ReviveSection, cursor: Any, count: int
) -> tuple[list[bytes], Any]:
    """Up to ``count`` ids of the section, from ``cursor``; the next cursor (None: done).
    Dead ids come oldest first (an offset: revived ones leave the set); broken ones
    in HSCAN order, which never repeats or misses one that stays."""
    if section is ReviveSection.DEAD:
        ids: list[bytes] = client.zrange(keys.dead, cursor, cursor + count - 1)  # type: ignore[assignment]
        return ids, (cursor if len(ids) == count else None)
    scan_cursor, found = hash_page(client, keys.broken, cursor, count)
    return list(found), (scan_cursor or None)


def revive(
    client: redis.Redis, keys: QueueKeys, section: ReviveSection, limit: Optional[int]
) -> tuple[int, int]:
    """Put up to ``limit`` (None: all) jobs of ``section`` back in the queue, in calls
    of at most ``REVIVE_BATCH_MAX``. Returns ``(revived, skipped)``: skipped are the
    ids that stayed (a broken id without an envelope cannot run again)."""
    revived = skipped = 0
    cursor: Any = 0
    call_keys = REVIVE.keys_for(keys)
    while cursor is not None and (limit is None or revived < limit):
        count = REVIVE_BATCH_MAX if limit is None else min(REVIVE_BATCH_MAX, limit - revived)
        ids, cursor = _page(client, keys, section, cursor, count)
        if not ids:
            break
        envelopes: list[Optional[bytes]] = client.hmget(keys.jobs, ids)  # type: ignore[assignment]
        jobs = [
            (job_id.decode(), *fresh_envelope(raw))
            for job_id, raw in zip(ids, envelopes)
            if raw is not None
        ]
        done = REVIVE.call(client, call_keys, REVIVE.argv(section, jobs)) if jobs else 0
        revived += done
        skipped += len(ids) - done
        if section is ReviveSection.DEAD and cursor is not None:
            cursor = skipped  # the revived left the set: skip only the ids that stayed
    return revived, skipped


def revive_ids(client: redis.Redis, keys: QueueKeys, section: ReviveSection, ids: list[str]) -> int:
    """Put the jobs ``ids`` of ``section`` back in the queue (at most
    ``REVIVE_BATCH_MAX``); those not in it are skipped. Returns how many went back."""
    if not ids:
        return 0
    envelopes: list[Optional[bytes]] = client.hmget(keys.jobs, ids)  # type: ignore[assignment]
    jobs = [
        (job_id, *fresh_envelope(raw)) for job_id, raw in zip(ids, envelopes) if raw is not None
    ]
    if not jobs:
        return 0
    return int(REVIVE.call(client, REVIVE.keys_for(keys), REVIVE.argv(section, jobs)))
