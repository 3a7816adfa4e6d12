"""The routes of workers in any language: claim jobs of a queue, heartbeat, and
report each job done or failed (Ocypod's job server, over fastq's own leases).

What each call does in Redis is :mod:`fastq.serve.api.claims`'; here only the HTTP,
through :func:`fastq.serve.api.endpoint.endpoint` as every route of the API: a body that
is not a JSON object is a 400, a wrong value a 422, a lost lease a 409. The app
that mounts these routes (``fastq serve``) checks the bearer token and bounds the
body.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from fastq.app import App
from fastq.serve.api.claim_token import DEFAULT_LEASE_S, MAX_CLAIM, MAX_LEASE_S, MIN_LEASE_S
from fastq.serve.api.claims import Claims
from fastq.serve.api.endpoint import endpoint, require_object

# The handlers run in the thread pool (:func:`fastq.serve.api.endpoint.endpoint`): redis-py blocks.


def claim(app: App, request: Request, body: Any) -> Any:
    """Claim up to ``max`` ready jobs of the queue, leased for ``lease_s``."""
    given = require_object(body, "a claim")
    jobs = Claims(app).claim(
        request.path_params["queue"], given.get("max"), given.get("lease_s"), given.get("worker")
    )
    return {"jobs": [job.to_json() for job in jobs]}


def heartbeat(app: App, request: Request, body: Any) -> Any:
    """Extend the lease of the job's claim; keep its progress."""
    given = require_object(body, "a heartbeat")
    held = Claims(app).heartbeat(
        request.path_params["id"], given.get("token"), given.get("progress")
    )
    return {"ok": True, "held": held}


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


ROUTES: list[Route] = [
    Route("/queues/{queue}/claim", endpoint(claim), methods=["POST"]),
    # a job id may hold '/' (any printable ASCII): matched up to the last segment
    Route("/jobs/{id:path}/heartbeat", endpoint(heartbeat), methods=["POST"]),
    Route("/jobs/{id:path}/done", endpoint(done), methods=["POST"]),
    Route("/jobs/{id:path}/fail", endpoint(fail), methods=["POST"]),
]


# -- OpenAPI -------------------------------------------------------------------------

# ``Error`` ({"error": "..."}) is the serving app's schema: every route's error reply
_ERROR = {"$ref": "#/components/schemas/Error"}
# what the app in front (fastq.serve.app) may answer to any request before it gets here
_GUARD = {
    "401": "no bearer token, or a wrong one",
    "403": "a server without a token answers only requests to localhost",
    "404": "no such route: a queue name or job id that cannot be one ('/' in a queue "
    "name, a line break in an id)",
    "413": "the body is larger than the server takes",
    "415": "a body that is not Content-Type: application/json",
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _responses(ok: dict[str, Any], ok_text: str, gone: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "200": {"description": ok_text, **_json(ok)},
        "400": {"description": "the body is not JSON, or not an object", **_json(_ERROR)},
        "422": {"description": "a field is wrong; the error names it", **_json(_ERROR)},
        "503": {"description": "Redis could not serve the call: try it again", **_json(_ERROR)},
    }
    for code, text in _GUARD.items():
        out[code] = {"description": text, **_json(_ERROR)}
    if gone:
        out["409"] = {
            "description": "the claim holds the job no longer: its lease lapsed and the "
            "job went back to its queue (a late done is counted, never applied), or it "
            "was settled already",
            **_json(_ERROR),
        }
    return dict(sorted(out.items()))


_JOB_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "the job's id: printable ASCII without whitespace",
    "schema": {"type": "string", "pattern": "^(?!fastq:)[!-~]{1,200}$"},
}
_TOKEN = {"type": "string", "description": "the token its claim returned with the job"}

OPENAPI_SCHEMAS: dict[str, Any] = {
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

OPENAPI_PATHS: dict[str, Any] = {
    "/api/v1/queues/{queue}/claim": {
        "post": {
            "summary": "Claim ready jobs of a queue, each leased to this claim",
            "description": "Leases up to `max` ready jobs for `lease_s` seconds. A lease "
            "not extended by a heartbeat lapses, and the job goes back to its queue (a "
            "stall is counted), exactly as for a Python worker. An empty list: nothing "
            "is ready (or the queue is paused, or its rate limit says wait).",
            "tags": ["workers"],
            "parameters": [
                {
                    "name": "queue",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,100}$"},
                }
            ],
            "requestBody": {
                "required": False,
                **_json(
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
                    }
                ),
            },
            "responses": _responses(
                {
                    "type": "object",
                    "properties": {
                        "jobs": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/ClaimedJob"},
                        }
                    },
                    "required": ["jobs"],
                },
                "the jobs claimed, perhaps none",
                gone=False,
            ),
        }
    },
    "/api/v1/jobs/{id}/heartbeat": {
        "post": {
            "summary": "Extend the lease of a claimed job (and report its progress)",
            "description": "Extends the lease of the job's claim by its `lease_s` (every "
            "job of one claim shares its lease). `progress`: a fraction in [0, 1], or "
            '`{"fraction": f, "meta": m}`, shown as the job\'s progress until it ends.',
            "tags": ["workers"],
            "parameters": [_JOB_ID],
            "requestBody": {
                "required": True,
                **_json(
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
                    }
                ),
            },
            "responses": _responses(
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
        }
    },
    "/api/v1/jobs/{id}/done": {
        "post": {
            "summary": "Report a claimed job done (with its result)",
            "description": "Acknowledges the job: it is done and never runs again. "
            "`result` (any JSON) is kept for `result_ttl_s` (a day by default) and read "
            "back with the job. Sent again after it went through, it succeeds again.",
            "tags": ["workers"],
            "parameters": [_JOB_ID],
            "requestBody": {
                "required": True,
                **_json(
                    {
                        "type": "object",
                        "properties": {
                            "token": _TOKEN,
                            "result": {},
                            "result_ttl_s": {"type": "number", "exclusiveMinimum": 0},
                        },
                        "required": ["token"],
                    }
                ),
            },
            "responses": _responses(
                {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                "the job is done",
            ),
        }
    },
    "/api/v1/jobs/{id}/fail": {
        "post": {
            "summary": "Report a claimed job failed",
            "description": "Retried after its backoff while its retry policy allows (the "
            "enqueue's `retries`, else the job's own, else 5), else dead with `error`; "
            '`"retry": false` sends it to the dead set at once.',
            "tags": ["workers"],
            "parameters": [_JOB_ID],
            "requestBody": {
                "required": True,
                **_json(
                    {
                        "type": "object",
                        "properties": {
                            "token": _TOKEN,
                            "error": {"type": "string", "minLength": 1},
                            "retry": {"type": "boolean", "default": True},
                            "traceback": {"type": "string"},
                        },
                        "required": ["token", "error"],
                    }
                ),
            },
            "responses": _responses(
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
        }
    },
}
