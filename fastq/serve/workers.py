"""The routes of workers in any language: claim jobs of a queue, heartbeat, and
report each job done or failed (Ocypod's job server, over fastq's own leases).

What each call does in Redis is :mod:`fastq.serve.leases`'; here only the HTTP: read
the body, map a body that is not a JSON object to 400, a wrong value to 422 and a
lost lease to 409. The app that mounts these routes (``fastq serve``) checks the
bearer token and bounds the body; its fastq App is ``request.app.state.fastq``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fastq.errors import RedisRefused, RedisUnavailable
from fastq.serve.leases import HttpWorkers
from fastq.serve.tokens import (
    DEFAULT_LEASE_S,
    MAX_CLAIM,
    MAX_LEASE_S,
    MIN_LEASE_S,
    BadRequest,
    LeaseGone,
)


def _error(message: str, status_code: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object.

    Raises:
        BadRequest: the body is not a JSON object.
    """
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


Params = dict[str, Any]
Handler = Callable[[HttpWorkers, Params, Params], Params]


def _endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint of ``handler(workers, path_params, body)``: it reads the
    body on the event loop, then runs the handler (blocking redis-py calls) in
    Starlette's thread pool, so the loop serves other requests meanwhile, and maps
    what it raises to a status."""

    async def endpoint(request: Request) -> Response:
        try:
            body = await _body(request)
        except BadRequest as exc:
            return _error(str(exc), 400)
        workers = HttpWorkers(request.app.state.fastq)
        try:
            reply = await run_in_threadpool(handler, workers, request.path_params, body)
        except BadRequest as exc:  # a value is wrong: 422, as the producers' routes say it
            return _error(str(exc), 422)
        except LeaseGone as exc:
            return _error(str(exc), 409)
        except (redis.RedisError, RedisUnavailable, RedisRefused) as exc:
            # retried by the client: a claim lost on the way costs one lease of
            # delay, a done sent again is harmless
            return _error(f"Redis could not serve the call: {type(exc).__name__}: {exc}", 503)
        return JSONResponse(reply)

    endpoint.__name__ = handler.__name__
    endpoint.__doc__ = handler.__doc__
    return endpoint


# The handlers are sync: they run in the thread pool (``_endpoint``), redis-py blocks.


def claim(workers: HttpWorkers, params: Params, body: Params) -> Params:
    """Claim up to ``max`` ready jobs of the queue, leased for ``lease_s``."""
    jobs = workers.claim(params["queue"], body.get("max"), body.get("lease_s"), body.get("worker"))
    return {"jobs": [job.to_json() for job in jobs]}


def heartbeat(workers: HttpWorkers, params: Params, body: Params) -> Params:
    """Extend the lease of the job's claim; keep its progress."""
    held = workers.heartbeat(params["id"], body.get("token"), body.get("progress"))
    return {"ok": True, "held": held}


def done(workers: HttpWorkers, params: Params, body: Params) -> Params:
    """The job is done (with its result)."""
    workers.done(
        params["id"],
        body.get("token"),
        body.get("result"),
        "result" in body,
        body.get("result_ttl_s"),
    )
    return {"ok": True}


def fail(workers: HttpWorkers, params: Params, body: Params) -> Params:
    """The job failed: retried by its policy, or dead."""
    outcome = workers.fail(
        params["id"],
        body.get("token"),
        body.get("error"),
        body.get("retry", True),
        body.get("traceback"),
    )
    return {"ok": True, "outcome": outcome}


ROUTES: list[Route] = [
    Route("/api/v1/queues/{queue}/claim", _endpoint(claim), methods=["POST"]),
    # a job id may hold '/' (any printable ASCII): matched up to the last segment
    Route("/api/v1/jobs/{id:path}/heartbeat", _endpoint(heartbeat), methods=["POST"]),
    Route("/api/v1/jobs/{id:path}/done", _endpoint(done), methods=["POST"]),
    Route("/api/v1/jobs/{id:path}/fail", _endpoint(fail), methods=["POST"]),
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
