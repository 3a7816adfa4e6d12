"""The routes of workers in any language: claim jobs of a queue, heartbeat, and
report each job done or failed (Ocypod's job server, over fastq's own leases).

What each call does in Redis is :mod:`fastq.serve.api.claims`'; here only the HTTP,
through :mod:`fastq.serve.api.endpoint` as every route of the API: a body that
is not a JSON object is a 400, a wrong value a 422, a lost lease a 409. The app
that mounts these routes (``fastq serve``) checks the bearer token and bounds the
body.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from fastq.app import App
from fastq.serve.api.claim_token import DEFAULT_LEASE_S, MAX_CLAIM, MAX_LEASE_S, MIN_LEASE_S
from fastq.serve.api.claims import Claims
from fastq.serve.api.endpoint import Routes, require_object
from fastq.serve.api.known import require_known
from fastq.serve.api.schemas import Schema, json_body, ref, reply
from fastq.serve.reply import HTTPError
from fastq.validate import check_queue_name

_TOKEN = {"type": "string", "description": "the token its claim returned with the job"}

# the schemas its routes refer to
SCHEMAS: dict[str, Schema] = {
    "ClaimedJob": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "args": {"type": "array", "items": {}},
            "kwargs": {"type": "object"},
            "attempt": {"type": "integer", "minimum": 1},
            "token": _TOKEN,
        },
        "required": ["id", "name", "args", "kwargs", "attempt", "token"],
    },
}

# what a refusal means on these routes, beside the words every route has
SAID = {
    "400": "the body is not JSON, or not an object",
    "404": "no such route: a queue name or job id that cannot be one ('/' in a queue "
    "name, a line break in an id); a claim on a queue the namespace does not know "
    "(its `queues` are the known ones)",
    "409": "the claim holds the job no longer: its lease lapsed and the job went back "
    "to its queue (a late done is counted, never applied), or it was settled already",
    "422": "a field is wrong; the error names it",
    "503": "Redis could not serve the call: try it again",
}

# the HTTP workers' routes, each declared beside its handler below
ROUTES = Routes(SCHEMAS, tags=["workers"])


# The handlers run in the thread pool (:mod:`fastq.serve.api.endpoint`): redis-py blocks.


@ROUTES.route(
    "POST",
    "/queues/{queue}/claim",
    "Claim ready jobs of a queue, each leased to this claim",
    reply(
        {
            "type": "object",
            "properties": {
                "jobs": {
                    "type": "array",
                    "items": ref("ClaimedJob"),
                }
            },
            "required": ["jobs"],
        },
        "the jobs claimed, perhaps none",
    ),
    errors=("400", "404", "422"),
    said=SAID,
    body={
        **json_body(
            {
                "type": "object",
                "properties": {
                    "max": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_CLAIM,
                        "default": 1,
                    },
                    "lease_s": {
                        "type": "number",
                        "minimum": MIN_LEASE_S,
                        "maximum": MAX_LEASE_S,
                        "default": DEFAULT_LEASE_S,
                    },
                    "worker": {
                        "type": "string",
                        "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                        "description": "a name for operators (in the jobs' records)",
                    },
                },
            },
            "how many jobs, for how long, and who claims",
        ),
        "required": False,
    },
    description="Leases up to `max` ready jobs for `lease_s` seconds. A lease "
    "not extended by a heartbeat lapses, and the job goes back to its queue (a "
    "stall is counted), exactly as for a Python worker. An empty list: nothing "
    "is ready (or the queue is paused, or its rate limit says wait).",
)
def claim(app: App, request: Request, body: Any) -> Any:
    """Claim up to ``max`` ready jobs of the queue, leased for ``lease_s``."""
    given = require_object(body, "a claim")
    queue = request.path_params["queue"]
    try:
        check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None
    # a typo in a worker's queue is a 404 naming the known ones, not an empty claim
    require_known(request, queue)
    jobs = Claims(app).claim(queue, given.get("max"), given.get("lease_s"), given.get("worker"))
    return {"jobs": [job.to_json() for job in jobs]}


@ROUTES.route(
    "POST",
    "/jobs/{id:path}/heartbeat",
    "Extend the lease of a claimed job (and report its progress)",
    reply(
        {
            "type": "object",
            "properties": {
                "ok": {"type": "boolean"},
                "held": {"type": "integer", "description": "jobs the lease covers"},
            },
            "required": ["ok", "held"],
        },
        "the lease is extended",
    ),
    errors=("400", "404", "409", "422"),
    said=SAID,
    body={
        **json_body(
            {
                "type": "object",
                "properties": {
                    "token": _TOKEN,
                    "progress": {
                        "oneOf": [
                            {"type": "number", "minimum": 0, "maximum": 1},
                            {
                                "type": "object",
                                "properties": {
                                    "fraction": {
                                        "type": "number",
                                        "minimum": 0,
                                        "maximum": 1,
                                    },
                                    "meta": {},
                                },
                                "required": ["fraction"],
                            },
                        ]
                    },
                },
                "required": ["token"],
            },
            "the claim's token, and the job's progress",
        ),
        "required": True,
    },
    description="Extends the lease of the job's claim by its `lease_s` (every "
    "job of one claim shares its lease). `progress`: a fraction in [0, 1], or "
    '`{"fraction": f, "meta": m}`, shown as the job\'s progress until it ends.',
)
def heartbeat(app: App, request: Request, body: Any) -> Any:
    """Extend the lease of the job's claim; keep its progress."""
    given = require_object(body, "a heartbeat")
    held = Claims(app).heartbeat(
        request.path_params["id"], given.get("token"), given.get("progress")
    )
    return {"ok": True, "held": held}


@ROUTES.route(
    "POST",
    "/jobs/{id:path}/done",
    "Report a claimed job done (with its result)",
    reply({"type": "object", "properties": {"ok": {"type": "boolean"}}}, "the job is done"),
    errors=("400", "404", "409", "422"),
    said=SAID,
    body={
        **json_body(
            {
                "type": "object",
                "properties": {
                    "token": _TOKEN,
                    "result": {},
                    "result_ttl_s": {"type": "number", "exclusiveMinimum": 0},
                },
                "required": ["token"],
            },
            "the claim's token, and the job's result",
        ),
        "required": True,
    },
    description="Acknowledges the job: it is done and never runs again. "
    "`result` (any JSON) is kept for `result_ttl_s` (a day by default) and read "
    "back with the job. Sent again after it went through, it succeeds again.",
)
def done(app: App, request: Request, body: Any) -> Any:
    """The job is done (with its result)."""
    given = require_object(body, "a done")
    Claims(app).done(
        request.path_params["id"],
        given.get("token"),
        given.get("result"),
        "result" in given,
        given.get("result_ttl_s"),
    )
    return {"ok": True}


@ROUTES.route(
    "POST",
    "/jobs/{id:path}/fail",
    "Report a claimed job failed",
    reply(
        {
            "type": "object",
            "properties": {
                "ok": {"type": "boolean"},
                "outcome": {"type": "string", "enum": ["retry", "dead"]},
            },
            "required": ["ok", "outcome"],
        },
        "the failure is settled: retried later, or dead",
    ),
    errors=("400", "404", "409", "422"),
    said=SAID,
    body={
        **json_body(
            {
                "type": "object",
                "properties": {
                    "token": _TOKEN,
                    "error": {"type": "string", "minLength": 1},
                    "retry": {"type": "boolean", "default": True},
                    "traceback": {"type": "string"},
                },
                "required": ["token", "error"],
            },
            "the claim's token, and the error",
        ),
        "required": True,
    },
    description="Retried after its backoff while its retry policy allows (the "
    "enqueue's `retries`, else the job's own, else 5), else dead with `error`; "
    '`"retry": false` sends it to the dead set at once.',
)
def fail(app: App, request: Request, body: Any) -> Any:
    """The job failed: retried by its policy, or dead."""
    given = require_object(body, "a fail")
    outcome = Claims(app).fail(
        request.path_params["id"],
        given.get("token"),
        given.get("error"),
        given.get("retry", True),
        given.get("traceback"),
    )
    return {"ok": True, "outcome": outcome}
