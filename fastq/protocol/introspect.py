"""Read-only views of a queue and its jobs: one job by the ``job_info`` script (what
other languages read a job with, docs/protocol.md), lists and counts with plain
Redis commands."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import orjson
import redis

from fastq.connection.typed import hash_page, sync_reply
from fastq.protocol import records
from fastq.protocol.contracts.reader import JOB_INFO, JobInfoReply
from fastq.protocol.keys import NamespaceKeys, QueueKeys

COUNTERS = (
    "enqueued",
    "processed",
    "failed",
    "retried",
    "dead",
    "broken",
    "stalled",
    "orphaned",
    "interrupted",
    "stale_acks",
    "purged",
    "cancelled",
    "revived",
)


@dataclass(frozen=True)
class JobInfo:
    """A job as it stands in Redis. Times are Unix seconds."""

    id: str
    queue: str
    # "queued", "scheduled", "active", "dead", "broken", "cancelled" or "done"
    state: str
    name: Optional[str]
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    # attempts that ended in a failure (or a Retry); of a job known by its record
    # (done, cancelled): the runs it took, the last included
    attempts: int = 0
    stalls: int = 0  # times its worker died or hung while running it
    enqueued_at: Optional[float] = None
    due_at: Optional[float] = None
    lease_until: Optional[float] = None
    worker: Optional[str] = None
    failed_at: Optional[float] = None
    last_error: Optional[str] = None
    traceback: Optional[str] = None
    broken_reason: Optional[str] = None
    raw: bytes = b""
    # the latest ``set_progress`` of a running job (None: it reported none)
    progress: Optional[float] = None
    progress_meta: Any = None
    tags: list[str] = field(default_factory=list)
    cancelled_at: Optional[float] = None
    # the record of a job that ended (done, dead, cancelled), while it lasts: when it
    # ended, how long its last run took (if known); worker and attempts come from it
    # too when nothing else says
    ended_at: Optional[float] = None
    run_ms: Optional[int] = None
    # the job's kept return value (``@app.job(result_ttl_s=...)``), while it lasts;
    # ``has_result`` tells a kept None from none kept
    result: Any = None
    has_result: bool = False
    # what of its envelope could not be read (written by hand, not by fastq's
    # producer: a string for a time, not JSON at all), None when all of it could
    unreadable: Optional[str] = None


def from_record(job_id: str, queue: str, rec: records.Record) -> JobInfo:
    """A job known only by its record: it completed, or was cancelled (or died,
    and its envelope was trimmed from the dead set before its record)."""
    return JobInfo(
        id=job_id,
        queue=queue,
        state=rec.outcome,
        name=None,
        attempts=rec.attempts or 0,
        worker=rec.worker,
        failed_at=rec.ended_at if rec.outcome == "dead" else None,
        last_error=rec.error,
        cancelled_at=rec.ended_at if rec.outcome == "cancelled" else None,
        ended_at=rec.ended_at,
        run_ms=rec.run_ms,
    )


def known_queues(client: redis.Redis, namespace: str) -> set[str]:
    """The queues the namespace knows (``NS:queues``: a sharded queue by its name)."""
    members = sync_reply(client.smembers(NamespaceKeys(namespace).queues))
    return {q.decode() if isinstance(q, bytes) else str(q) for q in members}


def held_by(
    client: redis.Redis, keys: QueueKeys, worker_id: str, ids: Sequence[bytes]
) -> list[bytes]:
    """Those of ``ids`` that ``worker_id`` holds leases on, in their order."""
    holds = sync_reply(client.smismember(keys.held(worker_id), list(ids)))
    return [job_id for job_id, held in zip(ids, holds) if held]


def is_known_queue(client: redis.Redis, namespace: str, queue: str) -> bool:
    """Does the namespace know ``queue`` (``NS:queues``)?"""
    return bool(sync_reply(client.sismember(NamespaceKeys(namespace).queues, queue)))


def which_exist(client: redis.Redis, groups: list[list[str]]) -> list[bool]:
    """For each group of keys, whether one of them exists, in one round trip (on a
    cluster, each group's keys in one slot)."""
    pipe = client.pipeline(transaction=False)
    for group in groups:
        pipe.exists(*group)
    return [bool(n) for n in pipe.execute()]


def _leases(client: redis.Redis, keys: QueueKeys) -> list[tuple[str, float]]:
    """(worker id, lease deadline in ms) of every worker holding a lease."""
    pairs: list[tuple[bytes, float]] = client.zrange(keys.leases, 0, -1, withscores=True)  # type: ignore[assignment]
    return [(worker.decode(), deadline) for worker, deadline in pairs]


def group_depths(client: redis.Redis, keys: QueueKeys) -> dict[str, int]:
    """The groups of a queue that have ready jobs (its ring, in the order it serves
    them next; ``""``: its jobs of no group) and how many each has ready."""
    ring: list[bytes] = client.lrange(keys.group_ring, 0, -1)  # type: ignore[assignment]
    groups = list(dict.fromkeys(g.decode("utf-8", "surrogateescape") for g in ring))
    pipe = client.pipeline(transaction=False)
    for group in groups:
        if group:
            pipe.execute_command("ZLEXCOUNT", keys.group_ready, f"[{group}\n", f"({group}\x0b")  # type: ignore[no-untyped-call]
        else:  # the jobs of no group: the queue's own ready list and prio set
            pipe.llen(keys.ready)
            pipe.zcard(keys.prio)
    replies = iter(pipe.execute())
    out: dict[str, int] = {}
    for group in groups:
        n = int(next(replies)) + (0 if group else int(next(replies)))
        if n:
            out[group] = n
    return out


def queue_stats(client: redis.Redis, keys: QueueKeys) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.ready)
    pipe.zcard(keys.prio)
    pipe.zcard(keys.group_ready)
    pipe.zcard(keys.scheduled)
    pipe.zcard(keys.dead)
    pipe.hlen(keys.broken)
    pipe.hgetall(keys.stats)
    pipe.hmget(keys.settings, ["paused", "rate", "rate_period_ms", "rate_burst"])
    for worker, _ in _leases(client, keys):
        pipe.scard(keys.held(worker))
    ready, prio, grouped, scheduled, dead, broken, counters, settings, *held = pipe.execute()
    inflight = sum(max(n - 1, 0) for n in held)  # less each held set's sentinel
    out = {name: 0 for name in COUNTERS}
    out.update({k.decode(): int(v) for k, v in counters.items() if k not in (b"seq", b"gfront")})
    out["total_dead"] = out.pop("dead")
    out["total_broken"] = out.pop("broken")
    out.update(
        ready=ready + prio + grouped,
        inflight=inflight,
        scheduled=scheduled,
        dead=dead,
        broken=broken,
    )
    paused, rate, rate_period_ms, rate_burst = settings
    out["paused"] = int(paused == b"1")
    # the rate limit: jobs per period and burst, all 0 for a queue without one
    out["rate"] = int(rate or 0)
    out["rate_period_ms"] = int(rate_period_ms or 0)
    out["rate_burst"] = int(rate_burst or 0)
    return out


def _seconds(ms: Any) -> Optional[float]:
    """Unix ms as seconds; None when absent or not a time (an envelope written by
    hand may hold a string, or a number far out of range)."""
    if isinstance(ms, bool):
        return None
    try:
        seconds = float(ms) / 1000.0
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds < 1e11 else None


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) or value is None else repr(value)


def _fields(env: Any) -> dict[str, Any]:
    """An envelope's fields by the names of the format before: the array
    ``[name, args, t, {fields}]`` mapped to them, an object as it is."""
    if isinstance(env, dict):
        return env
    if not isinstance(env, list) or len(env) not in (3, 4):
        return {}
    more = env[3] if len(env) == 4 and isinstance(env[3], dict) else {}
    return {**more, "name": env[0], "args": env[1], "kwargs": more.get("k"), "enqueued_at": env[2]}


# the fields a listing reads, and the type each must have to be read
_TYPED = (("name", str), ("args", list), ("kwargs", dict), ("attempts", int))


def _read(raw: Optional[bytes]) -> tuple[dict[str, Any], Optional[str]]:
    """An envelope's fields (:func:`_fields`), and what of it could not be read
    (None: all of it). A bad one never stops a listing of its queue."""
    if raw is None:
        return {}, None
    try:
        env = _fields(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        return {}, f"not JSON ({exc})"
    if not env:
        return {}, f"not an envelope: {raw[:60]!r}"
    bad = [
        f"{name} {env[name]!r}"
        for name, kind in _TYPED
        if env.get(name) is not None and not isinstance(env[name], kind)
    ]
    bad += [
        f"{name} {env[name]!r} (not a time in ms)"
        for name in ("enqueued_at", "failed_at")
        if env.get(name) is not None and _seconds(env[name]) is None
    ]
    return env, ", ".join(bad) or None


# job_info calls before giving up on a queue whose workers keep changing (each call
# that finds other workers than it was given replies with those it found)
_READ_ATTEMPTS = 5


def read_job(client: redis.Redis, keys: QueueKeys, job_id: str) -> JobInfoReply:
    """``job_info``'s reply for ``job_id`` in one queue: one call on a queue where no
    worker holds a lease, two where some do (the first replies with them).

    Raises:
        RuntimeError: the workers of the queue changed under every call.
    """
    fixed = JOB_INFO.keys_for(keys, job_id=job_id)
    workers: list[str] = []
    for _ in range(_READ_ATTEMPTS):
        held = [keys.held(worker) for worker in workers]
        reply = JOB_INFO.call(client, fixed + held, JOB_INFO.argv(workers, job_id))
        if not reply.stale:
            return reply
        workers = reply.workers
    raise RuntimeError(f"job_info: the workers of queue {keys.queue} kept changing; try again")


def get_job(client: redis.Redis, keys: QueueKeys, job_id: str) -> Optional[JobInfo]:
    """What Redis holds of ``job_id`` in one queue (None: nothing), read by the
    ``job_info`` script: the one read path of a job, fastq's and other languages'."""
    return job_info(job_id, keys.queue, read_job(client, keys, job_id))


def job_info(job_id: str, queue: str, reply: JobInfoReply) -> Optional[JobInfo]:
    """A :class:`JobInfo` of ``job_info``'s reply (None for an unknown job). The
    script reads and decides; here the envelope's args and kwargs are decoded (a
    hand-written envelope that is not JSON has none) and times made seconds."""
    if reply.state == "unknown":
        return None
    f = reply.fields
    raw: Optional[bytes] = f.get("envelope")
    env, unreadable = _read(raw)
    args, kwargs = env.get("args"), env.get("kwargs")
    fraction, meta = _progress(f.get("progress"))
    result, has_result = _result(f.get("result"))
    return JobInfo(
        id=job_id,
        queue=queue,
        state=reply.state,
        name=f.get("name"),
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},  # "k" is absent when empty
        attempts=f.get("attempts", 0),
        stalls=f.get("stalls", 0),
        enqueued_at=_seconds(f.get("enqueued_ms")),
        due_at=_seconds(f.get("due_ms")),
        lease_until=_seconds(f.get("lease_until_ms")),
        worker=f.get("worker"),
        failed_at=_seconds(f.get("failed_ms")),
        last_error=f.get("error"),
        traceback=f.get("traceback"),
        broken_reason=f.get("broken"),
        raw=raw or b"",
        progress=fraction,
        progress_meta=meta,
        tags=f.get("tags", []),
        cancelled_at=_seconds(f.get("cancelled_ms")),
        ended_at=_seconds(f.get("ended_ms")),
        run_ms=f.get("run_ms"),
        result=result,
        has_result=has_result,
        unreadable=unreadable,
    )


def _result(raw: Optional[bytes]) -> tuple[Any, bool]:
    """``(value, kept)`` of a kept return value (``fastq.protocol.results``: JSON);
    one that is not JSON (written by hand) is none."""
    if raw is None:
        return None, False
    try:
        return json.loads(raw), True
    except ValueError:
        return None, False


def job_states(client: redis.Redis, keys: QueueKeys, ids: list[str]) -> list[str]:
    """The state of each of ``ids`` (as :class:`JobInfo` has it), in a few pipelined
    commands: as its record says for a job that ended (``done``, ``dead``,
    ``cancelled``); ``gone`` for an id fastq no longer knows."""
    if not ids:
        return []
    leases = _leases(client, keys)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hexists(keys.jobs, job_id)
    pipe.zmscore(keys.scheduled, ids)
    pipe.zmscore(keys.dead, ids)
    pipe.hmget(keys.broken, ids)
    pipe.zmscore(keys.cancelled, ids)
    pipe.hmget(keys.records, ids)
    pipe.hmget(keys.records_old, ids)
    for holder, _ in leases:
        pipe.smismember(keys.held(holder), ids)
    replies = pipe.execute()
    exists, (due, died, broken, cancelled, new, old), held = (
        replies[: len(ids)],
        replies[len(ids) : len(ids) + 6],
        replies[len(ids) + 6 :],
    )
    recs = [n if n is not None else o for n, o in zip(new, old)]
    # a done job's record may be logged, not folded yet
    unknown = [i for i in range(len(ids)) if not exists[i] and recs[i] is None]
    if unknown:
        for i, rec in zip(unknown, records.look(client, keys, [ids[i] for i in unknown])):
            recs[i] = rec
    states = []
    for i in range(len(ids)):
        if not exists[i]:
            if recs[i] is not None:
                state = records.parse(recs[i]).outcome
            else:
                state = "cancelled" if cancelled[i] is not None else "gone"
        elif broken[i] is not None:
            state = "broken"
        elif died[i] is not None:
            state = "dead"
        elif any(h[i] for h in held):
            state = "active"
        elif due[i] is not None:
            state = "scheduled"
        else:
            state = "queued"
        states.append(state)
    return states


@dataclass(frozen=True)
class TaggedJob:
    """One job of :meth:`fastq.App.jobs_by_tag`."""

    id: str
    queue: str
    state: str


@dataclass(frozen=True)
class TagPage:
    """A page of :meth:`fastq.App.jobs_by_tag`; ``cursor`` gets the next page (None:
    this is the last)."""

    jobs: list[TaggedJob]
    cursor: Optional[str]


def tagged_ids(
    client: redis.Redis, keys: QueueKeys, tag: str, after: Optional[str], count: int
) -> list[str]:
    """Up to ``count`` ids of live jobs tagged ``tag`` in one queue, in id order,
    after the id ``after`` (None: from the first)."""
    start = f"({tag}\n{after}" if after is not None else f"[{tag}\n"
    members = client.zrangebylex(keys.tagged, start, f"({tag}\x0b", 0, count)
    cut = len(tag.encode()) + 1
    return [m[cut:].decode() for m in members]  # type: ignore[union-attr]


def _progress(raw: Optional[bytes]) -> tuple[Optional[float], Any]:
    """``(fraction, meta)`` of a stored progress report (``fastq.context``)."""
    if raw is None:
        return None, None
    try:
        report = orjson.loads(raw)
        return float(report["fraction"]), report.get("meta")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None, None


def _listed(job_id: str, keys: QueueKeys, state: str, raw: Optional[bytes]) -> JobInfo:
    """A dead or broken job as a listing shows it, from its envelope alone."""
    env, unreadable = _read(raw)
    name, args, kwargs, failed = (env.get(f) for f in ("name", "args", "kwargs", "attempts"))
    return JobInfo(
        id=job_id,
        queue=keys.queue,
        state=state,
        name=name if isinstance(name, str) else None,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        attempts=failed if isinstance(failed, int) else 0,
        enqueued_at=_seconds(env.get("enqueued_at")),
        failed_at=_seconds(env.get("failed_at")),
        last_error=_text(env.get("error")),
        traceback=_text(env.get("traceback")),
        raw=raw or b"",
        unreadable=unreadable,
    )


def dead_jobs(client: redis.Redis, keys: QueueKeys, limit: int) -> list[JobInfo]:
    """The ``limit`` oldest dead jobs of a queue (the next the trim deletes)."""
    pairs: list[tuple[bytes, float]] = client.zrange(keys.dead, 0, limit - 1, withscores=True)  # type: ignore[assignment]
    if not pairs:
        return []
    ids = [job_id for job_id, _ in pairs]
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.jobs, ids)
    pipe.hmget(keys.poison, ids)
    envelopes, poisons = pipe.execute()
    out = []
    for (job_id, died_ms), raw, poison in zip(pairs, envelopes, poisons):
        info = _listed(job_id.decode(), keys, "dead", raw)
        error = poison.decode("utf-8", "replace") if poison is not None else info.last_error
        out.append(dataclasses.replace(info, failed_at=died_ms / 1000.0, last_error=error))
    return out


def broken_jobs(client: redis.Redis, keys: QueueKeys, limit: int) -> list[JobInfo]:
    """Up to ``limit`` broken jobs of a queue, each with why it could not run."""
    reasons: dict[bytes, bytes] = {}
    cursor = 0
    while len(reasons) < limit:
        cursor, found = hash_page(client, keys.broken, cursor, limit)
        reasons.update(found)
        if not cursor:
            break
    ids = list(reasons)[:limit]
    if not ids:
        return []
    envelopes: list[Optional[bytes]] = client.hmget(keys.jobs, ids)  # type: ignore[assignment]
    return [
        dataclasses.replace(
            _listed(job_id.decode(), keys, "broken", raw),
            broken_reason=reasons[job_id].decode("utf-8", "replace"),
        )
        for job_id, raw in zip(ids, envelopes)
    ]


_SENTINEL_PREFIX = b"fastq:sentinel:"  # lua/lib/sentinel.lua: a held set's permanent member


@dataclass(frozen=True)
class Holder:
    """A worker holding jobs of one queue now: its id (``host:pid:random``), when its
    lease lapses (Unix seconds) unless it extends it, and the jobs it holds (id ->
    job name), running or claimed with their batch."""

    worker: str
    queue: str
    lease_until: float
    jobs: dict[str, Optional[str]]


def holders(client: redis.Redis, keys: QueueKeys) -> list[Holder]:
    """Every worker holding jobs of a queue, with those jobs (a few commands per
    worker; a held set is at most a batch or two)."""
    leases = _leases(client, keys)
    if not leases:
        return []
    pipe = client.pipeline(transaction=False)
    for worker, _ in leases:
        pipe.smembers(keys.held(worker))
    held = [sorted(m for m in ids if not m.startswith(_SENTINEL_PREFIX)) for ids in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    for ids in held:
        if ids:  # (no ECHO in its place: a cluster pipeline refuses it)
            pipe.hmget(keys.jobs, ids)
    replies = iter(pipe.execute())
    out = []
    for (worker, deadline_ms), ids in zip(leases, held):
        names = {}
        for job_id, raw in zip(ids, next(replies) if ids else []):
            try:
                name = _fields(orjson.loads(raw)).get("name") if raw is not None else None
            except orjson.JSONDecodeError:
                name = None
            names[job_id.decode()] = name if isinstance(name, str) else None
        out.append(Holder(worker, keys.queue, deadline_ms / 1000.0, names))
    return out
