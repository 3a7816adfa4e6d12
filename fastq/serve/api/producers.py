"""The producer's routes: enqueue, read a job back, cancel it; the queues, their
stats, pause, resume and rate limit; each declared in :data:`ROUTES` with its
OpenAPI entry, and run in the thread pool (:mod:`fastq.serve.api.endpoint`):
fastq's calls block on Redis."""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import Scope

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.errors import NoResult
from fastq.protocol.introspect import JobInfo
from fastq.serve.api.endpoint import Routes, json_type, require_object
from fastq.serve.api.enqueue import MAX_JOBS_PER_REQUEST, parse_jobs, send
from fastq.serve.api.known import require_known
from fastq.serve.api.schemas import (
    JOB_ID,
    QUEUE_NAME,
    SECONDS,
    Schema,
    json_body,
    nullable,
    ref,
    reply,
)
from fastq.serve.reply import HTTPError
from fastq.validate import (
    MAX_DELAY_S,
    MAX_GROUP_CHARS,
    MAX_JOB_ID_BYTES,
    MAX_JOB_NAME_CHARS,
    MAX_PRIORITY,
    MAX_RATE,
    MAX_SHARDS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_UNIQUE_KEY_CHARS,
    UNIQUE_UNTIL,
    RateLimit,
    check_job_id,
    check_queue_name,
    check_rate_limit,
    check_shards,
)

# the schemas its routes refer to
SCHEMAS: dict[str, Schema] = {
    "Job": {
        "type": "object",
        "description": "A job to enqueue: its call, and any enqueue option (null: left out).",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_JOB_NAME_CHARS,
                "description": "the registered job name (printable: no control character)",
            },
            "args": nullable({"type": "array", "description": "positional arguments"}),
            "kwargs": nullable({"type": "object", "description": "keyword arguments"}),
            "id": nullable(
                {
                    **JOB_ID,
                    "description": "the job's id (idempotent: an id "
                    "that exists adds nothing); default: a fresh one",
                }
            ),
            "priority": nullable(
                {
                    "type": "integer",
                    "minimum": -MAX_PRIORITY,
                    "maximum": MAX_PRIORITY,
                    "description": "higher runs first",
                }
            ),
            "delay_s": nullable({**SECONDS, "description": "run no sooner than this"}),
            "at": {
                "description": "run no sooner than this instant: Unix seconds, or ISO 8601 "
                "with an offset (2026-12-01T09:00:00Z); not with delay_s",
                "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}, {"type": "null"}],
            },
            "tags": nullable(
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_TAGS,
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
                }
            ),
            "unique_for_s": nullable(
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DELAY_S}
            ),
            "unique_key": nullable(
                {"type": "string", "minLength": 1, "maxLength": MAX_UNIQUE_KEY_CHARS}
            ),
            "unique_until": {"enum": [*UNIQUE_UNTIL, None]},
            "retries": nullable(
                {"type": "integer", "minimum": 0, "description": "further attempts after the first"}
            ),
            "age_limit_s": nullable({"type": "number", "exclusiveMinimum": 0}),
            "shard_key": nullable(
                {"type": "string", "minLength": 1, "maxLength": MAX_UNIQUE_KEY_CHARS}
            ),
            "group": nullable(
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_GROUP_CHARS,
                    "description": "its group: the queue serves its groups round-robin",
                }
            ),
            "batch": nullable(
                {
                    "type": "string",
                    "pattern": f"^(?!fastq:)[!-z|~]{{1,{MAX_JOB_ID_BYTES}}}$",
                    "description": "the open batch it joins (POST /api/v1/batches): one "
                    "for every job of a request; a batch that is not open: 409",
                }
            ),
        },
    },
    "Enqueued": {
        "type": "object",
        "required": ["ids"],
        "properties": {
            "ids": {
                "type": "array",
                "items": {"type": "string"},
                "description": "one per job, in order (a unique job refused "
                "by a held lock: the holder's id)",
            }
        },
    },
    "JobState": {
        "type": "object",
        "required": ["id", "queue", "state", "attempts", "error", "progress"],
        "properties": {
            "id": {"type": "string"},
            "queue": {"type": "string"},
            "state": {
                "enum": ["queued", "scheduled", "active", "done", "dead", "broken", "cancelled"]
            },
            "name": nullable({"type": "string"}),
            "args": {"type": "array"},
            "kwargs": {"type": "object"},
            "attempts": {"type": "integer", "description": "attempts that failed"},
            "stalls": {"type": "integer"},
            "error": nullable({"type": "string", "description": "the last error"}),
            "traceback": nullable({"type": "string"}),
            "broken_reason": nullable({"type": "string"}),
            "progress": nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "progress_meta": {"description": "what the job reported with its progress"},
            "result": {
                "description": "a done job's kept return value (result_ttl_s); "
                "absent when none is kept"
            },
            "tags": {"type": "array", "items": {"type": "string"}},
            "worker": nullable({"type": "string"}),
            "enqueued_at": nullable({"type": "number"}),
            "due_at": nullable({"type": "number"}),
            "lease_until": nullable({"type": "number"}),
            "failed_at": nullable({"type": "number"}),
            "cancelled_at": nullable({"type": "number"}),
            "ended_at": nullable({"type": "number"}),
            "run_ms": nullable({"type": "integer"}),
            "unreadable": nullable(
                {
                    "type": "string",
                    "description": "what of its envelope could not be read (one written "
                    "by hand: NaN, not JSON, a field of the wrong type); its args and "
                    "kwargs are then not its own. null: all of it was read",
                }
            ),
        },
    },
    "Cancelled": {
        "type": "object",
        "required": ["id", "stopped", "held"],
        "properties": {
            "id": {"type": "string"},
            "stopped": {"type": "boolean", "description": "it will never run"},
            "held": {"type": "boolean", "description": "a worker held it: it may still run"},
        },
    },
    "Stats": {
        "type": "object",
        "description": "counts and counters, as `fastq stats --json`",
        "additionalProperties": {"type": "integer"},
    },
    "QueueStats": {
        "type": "object",
        "required": ["name", "stats"],
        "properties": {"name": {"type": "string"}, "stats": ref("Stats")},
    },
    "Queues": {
        "type": "object",
        "required": ["queues"],
        "properties": {"queues": {"type": "array", "items": ref("QueueStats")}},
    },
    "Paused": {
        "type": "object",
        "required": ["name", "paused"],
        "properties": {"name": {"type": "string"}, "paused": {"type": "boolean"}},
    },
    "RateLimitRequest": {
        "type": "object",
        "required": ["rate"],
        "additionalProperties": False,
        "properties": {
            "rate": nullable(
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RATE,
                    "description": "jobs per period; null lifts the limit",
                }
            ),
            "per_s": nullable(
                {
                    "type": "number",
                    "minimum": 0.001,
                    "maximum": 86400,
                    "description": "the period (default 1 s)",
                }
            ),
            "burst": nullable({"type": "integer", "minimum": 1, "maximum": MAX_RATE}),
        },
    },
    "QueueSettings": {
        "type": "object",
        "description": "A queue's settings; a field left out is left as it is.",
        "additionalProperties": False,
        "properties": {
            "shards": nullable(
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SHARDS,
                    "description": "spread the queue over this many shards (its count "
                    "cannot change once written: another one is a 409); null: as it is",
                }
            ),
            "rate_limit": {
                "anyOf": [{"type": "null"}, ref("RateLimitRequest")],
                "description": "the queue's rate limit (null: none)",
            },
        },
    },
    "Queue": {
        "type": "object",
        "required": ["name", "shards", "rate_limit"],
        "properties": {
            "name": {"type": "string"},
            "shards": {"type": "integer"},
            "rate_limit": {"anyOf": [{"type": "null"}, ref("RateLimitShown")]},
        },
    },
    "RateLimitShown": {
        "type": "object",
        "required": ["rate", "per_s", "burst"],
        "properties": {
            "rate": {"type": "integer"},
            "per_s": {"type": "number"},
            "burst": {"type": "integer"},
        },
    },
    "RateLimit": {
        "type": "object",
        "required": ["name", "rate_limit"],
        "properties": {
            "name": {"type": "string"},
            "rate_limit": {"anyOf": [{"type": "null"}, ref("RateLimitShown")]},
        },
    },
}


class JobRoute(Route):
    """``/api/v1/jobs/{job_id:path}``: an id may hold a ``/`` (sent as ``%2F`` or
    not). A request of another method whose id holds one is no request of this
    route (a 404, not a 405): ``POST /api/v1/jobs/a/b/done`` is a worker route's
    path with an id ``a/b``, or nothing."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.PARTIAL and "/" in child["path_params"].get("job_id", ""):
            return Match.NONE, {}
        return match, child


QUEUE_QUERY: Schema = {
    "name": "queue",
    "in": "query",
    "required": False,
    "schema": QUEUE_NAME,
    "description": "the job's queue; without it every known queue is searched",
}
# the producers' routes, each declared beside its handler below
ROUTES = Routes(SCHEMAS)

# what a job's reply holds, by the JobInfo attribute it comes from
JOB_ATTRIBUTES = (
    "id",
    "queue",
    "state",
    "name",
    "args",
    "kwargs",
    "attempts",
    "stalls",
    "enqueued_at",
    "due_at",
    "lease_until",
    "worker",
    "failed_at",
    "traceback",
    "broken_reason",
    "progress",
    "progress_meta",
    "tags",
    "cancelled_at",
    "ended_at",
    "run_ms",
    "unreadable",
)


def _path_queue(request: Request) -> str:
    queue = request.path_params["queue"]
    try:
        return check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


def _query_queue(request: Request) -> Optional[str]:
    """``?queue=``: the job's queue (without it every known queue is searched)."""
    queue = request.query_params.get("queue")
    if queue is None:
        return None
    try:
        return check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"queue: {exc}") from None


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    try:
        return check_job_id(job_id)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


def job_view(info: JobInfo) -> dict[str, Any]:
    """A job as the API shows it: JobInfo's attributes (times in Unix seconds),
    ``error`` its last error."""
    view = {name: getattr(info, name, None) for name in JOB_ATTRIBUTES}
    view["error"] = info.last_error
    view["tags"] = list(view["tags"] or ())
    return view


# -- jobs -------------------------------------------------------------------------


@ROUTES.route(
    "POST",
    "/queues/{queue}/jobs",
    "Enqueue one job or an array of them",
    reply(ref("Enqueued"), "the jobs' ids"),
    errors=("400", "404", "409", "422"),
    body=json_body(
        {
            "anyOf": [
                ref("Job"),
                {
                    "type": "array",
                    "items": ref("Job"),
                    "minItems": 1,
                    "maxItems": MAX_JOBS_PER_REQUEST,
                },
            ]
        },
        "a job, or an array of jobs (all checked before any is sent: a "
        "refused request enqueues nothing)",
    ),
)
def enqueue(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/jobs: one job object or an array of them."""
    jobs = parse_jobs(app, body, _path_queue(request))
    return {"ids": send(app, jobs)}


@ROUTES.route(
    "GET",
    "/jobs/{job_id:path}",
    "A job's state, attempts, error, progress and result",
    reply(ref("JobState"), "the job"),
    errors=("404", "422"),
    query=[QUEUE_QUERY],
    route_class=JobRoute,
)
def read_job(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/jobs/{id}: state, attempts, error, progress, and a done job's
    kept result (``result``, present only when the job keeps one)."""
    job_id, queue = _job_id(request), _query_queue(request)
    info = app.get_job(job_id, queue)
    if info is None:
        where = f" in queue {queue!r}" if queue else ""
        raise HTTPError(
            404,
            f"no job {job_id!r}{where}: an unknown id, or a job that ended and whose "
            "record is gone",
        )
    view = job_view(info)
    if info.state == "done":
        # no result_ttl_s, or it expired: no "result"
        with contextlib.suppress(NoResult):
            view["result"] = app.result(job_id, 0, queue=info.queue)
    return view


@ROUTES.route(
    "DELETE",
    "/jobs/{job_id:path}",
    "Cancel a job yet to end",
    reply(ref("Cancelled"), "what was cancelled"),
    errors=("404", "409", "422"),
    query=[QUEUE_QUERY],
    route_class=JobRoute,
)
def cancel_job(app: App, request: Request, body: Any) -> Any:
    """DELETE /api/v1/jobs/{id}: cancel a job that has not ended."""
    job_id, queue = _job_id(request), _query_queue(request)
    done = app.cancel(job_id, queue)
    if done:
        return {"id": job_id, "stopped": done.stopped > 0, "held": done.held > 0}
    info = app.get_job(job_id, queue)
    if info is None:
        raise HTTPError(404, f"no job {job_id!r} to cancel: an unknown id, or its record is gone")
    raise HTTPError(
        409,
        f"job {job_id!r} is {info.state}: only a job yet to end can be cancelled",
        state=info.state,
    )


# -- queues -----------------------------------------------------------------------


@ROUTES.route(
    "GET", "/queues", "Every known queue with its stats", reply(ref("Queues"), "the queues")
)
def list_queues(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/queues: every known queue with its stats."""
    names = [q for q in app.queues() if valid_name(q)]
    return {"queues": [{"name": q, "stats": app.stats(q)} for q in names]}


@ROUTES.route(
    "GET",
    "/queues/{queue}",
    "A queue's stats",
    reply(ref("QueueStats"), "its stats"),
    errors=("404", "422"),
)
def queue_stats(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/queues/{queue}: one queue's stats."""
    queue = require_known(request, _path_queue(request))
    return {"name": queue, "stats": app.stats(queue)}


@ROUTES.route(
    "POST",
    "/queues/{queue}/pause",
    "Stop workers claiming from the queue",
    reply(ref("Paused"), "paused"),
    errors=("404", "422"),
)
def pause(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/pause."""
    queue = require_known(request, _path_queue(request))
    app.pause(queue)
    return {"name": queue, "paused": True}


@ROUTES.route(
    "POST",
    "/queues/{queue}/resume",
    "Let workers claim from the queue again",
    reply(ref("Paused"), "resumed"),
    errors=("404", "422"),
)
def resume(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/resume."""
    queue = require_known(request, _path_queue(request))
    app.resume(queue)
    return {"name": queue, "paused": False}


RATE_FIELDS = ("rate", "per_s", "burst")
QUEUE_FIELDS = ("shards", "rate_limit")


def _rate_limit_of(given: Any, where: str) -> Optional[RateLimit]:
    """A ``RateLimitRequest``'s limit (None: ``"rate": null``, no limit).

    Raises:
        HTTPError: 400, not an object; 422, a field unknown, missing or wrong.
    """
    if not isinstance(given, dict):
        raise HTTPError(400, f"{where}: must be a JSON object, not {json_type(given)}")
    unknown = [key for key in given if key not in RATE_FIELDS]
    if unknown:
        raise HTTPError(422, f"{unknown[0]}: unknown field (fields: {', '.join(RATE_FIELDS)})")
    if "rate" not in given:
        raise HTTPError(422, "rate: required (jobs per period; null lifts the limit)")
    rate, per_s = given["rate"], given.get("per_s")
    # per_s and burst are checked beside "rate": null too: a wrong value is never taken
    limit = check_rate_limit(
        1 if rate is None else rate, 1.0 if per_s is None else per_s, given.get("burst")
    )
    return None if rate is None else limit


def _shown(limit: Optional[RateLimit]) -> Optional[dict[str, Any]]:
    if limit is None:
        return None
    return {"rate": limit.rate, "per_s": limit.period_ms / 1000, "burst": limit.burst}


def _apply_rate_limit(app: App, queue: str, limit: Optional[RateLimit]) -> None:
    """Set ``limit`` on ``queue`` unless it holds it already: setting a limit starts it
    afresh (a full burst), which the same settings sent again must not do."""
    if app.rate_limit(queue) == limit:
        return
    if limit is None:
        app.set_rate_limit(queue, None)
    else:
        app.set_rate_limit(queue, limit.rate, per_s=limit.period_ms / 1000, burst=limit.burst)


@ROUTES.route(
    "PUT",
    "/queues/{queue}",
    "Declare a queue, with its settings",
    reply(ref("Queue"), "the queue as it is now"),
    errors=("400", "404", "409", "422"),
    said={
        "404": "a queue name no route takes (a newline in it)",
        "409": "the queue has another shard count (it cannot change once written)",
    },
    body={
        **json_body(ref("QueueSettings"), "its settings; none: only declare it"),
        "required": False,
    },
    description="Makes the queue known to every process of the namespace at once (no "
    "server nor worker restarts): jobs can be enqueued on it and claimed from it. "
    "Idempotent: the same settings again change nothing.",
)
def declare_queue(app: App, request: Request, body: Any) -> Any:
    """PUT /api/v1/queues/{queue}: ``{"shards"?, "rate_limit"?}``."""
    queue = _path_queue(request)
    given = require_object(body, "a queue's settings")
    unknown = [key for key in given if key not in QUEUE_FIELDS]
    if unknown:
        raise HTTPError(422, f"{unknown[0]}: unknown field (fields: {', '.join(QUEUE_FIELDS)})")
    shards = given.get("shards")
    if shards is not None:
        try:
            check_shards(shards)
        except (TypeError, ValueError) as exc:
            raise HTTPError(422, str(exc)) from None
    # every value checked before the first write: a refused request writes nothing
    limit = None
    if given.get("rate_limit") is not None:
        limit = _rate_limit_of(given["rate_limit"], "rate_limit")
    if shards is not None:
        app.shard_counts.record(app.redis, app.namespace, queue, shards)
    app.declare_queue(queue)  # known to the namespace, so to every process, at once
    if "rate_limit" in given:
        _apply_rate_limit(app, queue, limit)
    return {"name": queue, "shards": app.shards(queue), "rate_limit": _shown(app.rate_limit(queue))}


@ROUTES.route(
    "PUT",
    "/queues/{queue}/rate_limit",
    "Set or lift the queue's rate limit",
    reply(ref("RateLimit"), "the limit now"),
    errors=("400", "404", "422"),
    body=json_body(ref("RateLimitRequest"), "the limit; rate null lifts it"),
)
def set_rate_limit(app: App, request: Request, body: Any) -> Any:
    """PUT /api/v1/queues/{queue}/rate_limit: ``{"rate", "per_s", "burst"}``;
    ``"rate": null`` lifts the limit."""
    queue = require_known(request, _path_queue(request))
    given = require_object(body, "rate_limit")
    limit = _rate_limit_of(given, "rate_limit")
    if limit is None:
        app.set_rate_limit(queue, None)
    else:
        app.set_rate_limit(queue, limit.rate, per_s=limit.period_ms / 1000, burst=limit.burst)
    return {"name": queue, "rate_limit": _shown(app.rate_limit(queue))}
