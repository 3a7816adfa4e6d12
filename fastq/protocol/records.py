"""The records of jobs that ended: read them, list the recent ones, set how long a
queue keeps them.

The scripts that end a job (``ack``, ``ack_taken``, ``release`` when it buries a
poison job, ``cancel``) write its record in the same call (``lua/lib/records.lua``):
``records`` maps the id to ``outcome|ended_ms|attempts|run_ms|error|worker``, and
``records_old`` is the previous generation. Done records are logged a batch to a
field and folded into one record per id later (the reaper; the ``fold`` script,
which every read here calls first when it must). They are trimmed a generation at
a time, by age and count, per queue, as the queue's settings say
(``records_max_age_ms``, ``records_max_len``; absent: the defaults below; a max
length of 0 turns records off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import redis

from fastq.connection.typed import sync_reply
from fastq.protocol.contracts import FOLD
from fastq.protocol.keys import QueueKeys

# lua/lib/records.lua's defaults (the settings hash overrides them per queue)
DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_LEN = 100_000
OUTCOMES = ("done", "dead", "cancelled")
# the field of a generation that says when it began (or was retired), never an id
_SINCE = b""
# the fields of a generation that are no id: its counts and logged batches
_RESERVED = b"fastq:"
# ids per fold call that reads records (Lua's unpack is bounded)
_FOLD_IDS = 1000
# fields read per HSCAN step of a listing
_SCAN_COUNT = 1000


@dataclass(frozen=True)
class Record:
    """How a job ended: ``outcome`` (``done``, ``dead``, ``cancelled``), when
    (``ended_at``, Unix seconds, Redis' clock), and what is known of its last run:
    ``attempts`` (how many times it ran, that one included: a done or dead job's),
    ``run_ms`` (a done job's last run, whole ms), ``worker`` (the worker that ran
    it), ``error`` (a dead job's last error, at most 200 bytes); None when not known."""

    outcome: str
    ended_at: float
    attempts: Optional[int] = None
    run_ms: Optional[int] = None
    error: Optional[str] = None
    worker: Optional[str] = None


def parse(raw: bytes) -> Record:
    """A record as ``lua/lib/records.lua`` writes it."""
    text = raw.decode("utf-8", "replace")
    outcome, ended, attempts, run_ms, rest = text.split("|", 4)
    error, _, worker = rest.rpartition("|")
    return Record(
        outcome=outcome,
        ended_at=int(ended) / 1000.0,
        attempts=int(attempts) if attempts else None,
        run_ms=int(run_ms) if run_ms else None,
        error=error or None,
        worker=worker or None,
    )


def read(client: redis.Redis, keys: QueueKeys, job_id: str) -> Optional[Record]:
    raw = lookup(client, keys, job_id)
    return parse(raw) if raw is not None else None


def lookup(client: redis.Redis, keys: QueueKeys, job_id: str) -> Optional[bytes]:
    """The raw record of ``job_id``, from the current generation, else the previous."""
    return look(client, keys, [job_id])[0]


def look(client: redis.Redis, keys: QueueKeys, ids: list[str]) -> list[Optional[bytes]]:
    """The raw records of ``ids`` (None: none), every logged one folded first (the
    ``fold`` script: atomic, so a job that ended before the call has its record)."""
    out: list[Optional[bytes]] = []
    fold_keys = FOLD.keys_for(keys)
    for lo in range(0, len(ids), _FOLD_IDS):
        out += FOLD.call(client, fold_keys, FOLD.argv(ids[lo : lo + _FOLD_IDS]))
    return out


def fold(client: redis.Redis, keys: QueueKeys) -> None:
    """Fold every logged record of the queue of ``keys`` into its generation."""
    FOLD.call(client, FOLD.keys_for(keys), FOLD.argv())


def recent(
    client: redis.Redis, keys: QueueKeys, outcome: Optional[str], limit: int
) -> list[tuple[str, Record]]:
    """Up to ``limit`` records of one queue, newest first, of one ``outcome`` (None:
    any). Folds the logged ones, then reads the current generation whole (HSCAN),
    and the previous one only if that is not enough: every record in it is older."""
    out: list[tuple[str, Record]] = []
    seen: set[bytes] = set()
    fold(client, keys)
    for key in (keys.records, keys.records_old):
        found: list[tuple[str, Record]] = []
        for job_id, raw in client.hscan_iter(key, count=_SCAN_COUNT):
            if job_id == _SINCE or job_id in seen or job_id.startswith(_RESERVED):
                continue
            seen.add(job_id)
            rec = parse(raw)
            if outcome is None or rec.outcome == outcome:
                found.append((job_id.decode(), rec))
        found.sort(key=lambda pair: pair[1].ended_at, reverse=True)
        out += found[: limit - len(out)]
        if len(out) >= limit:
            break
    return out


def configure(
    client: redis.Redis, keys: QueueKeys, max_age_ms: Optional[int], max_len: Optional[int]
) -> None:
    """Set a queue's record limits (None: back to the default)."""
    pipe = client.pipeline(transaction=False)
    for name, value in (("records_max_age_ms", max_age_ms), ("records_max_len", max_len)):
        if value is None:
            pipe.hdel(keys.settings, name)
        else:
            # a mapping: redis-py 7 types a value given alone as str
            pipe.hset(keys.settings, mapping={name: value})
    pipe.execute()


def limits(client: redis.Redis, keys: QueueKeys) -> tuple[int, int]:
    """A queue's ``(max_age_ms, max_len)`` of records (max_len 0: off)."""
    age, length = sync_reply(client.hmget(keys.settings, ["records_max_age_ms", "records_max_len"]))
    return (
        int(age) if age is not None else DEFAULT_MAX_AGE_MS,
        int(length) if length is not None else DEFAULT_MAX_LEN,
    )
