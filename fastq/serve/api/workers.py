"""The routes of workers in any language: claim jobs of a queue, heartbeat, and
report each job done or failed (Ocypod's job server, over fastq's own leases).

What each call does in Redis is :mod:`fastq.serve.api.claims`'; here only the HTTP,
through :mod:`fastq.serve.api.endpoint` as every route of the API: a body that
is not a JSON object is a 400, a wrong value a 422, a lost lease a 409. The app
that mounts these routes (``fastq serve``) checks the bearer token and bounds the
body.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import anyio
import anyio.to_thread
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from fastq.app import App
from fastq.serve.api.claim_token import (
    DEFAULT_LEASE_S,
    MAX_CLAIM,
    MAX_LEASE_S,
    MAX_WAIT_S,
    MIN_LEASE_S,
    check_wait,
)
from fastq.serve.api.claims import MAX_ACK, Claims
from fastq.serve.api.endpoint import Routes, json_type, require_object
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
    "AckAnswer": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "ok": {"type": "boolean", "description": "whether it was applied"},
            "outcome": {
                "type": "string",
                "enum": ["retry", "dead"],
                "description": "a failure's, when applied",
            },
            "error": {
                "type": "string",
                "enum": ["lease_gone", "unknown_job"],
                "description": "why it was refused: the claim holds the job no longer "
                "(as a 409 of one job's done), or the queue holds no such job nor its record",
            },
            "message": {"type": "string"},
        },
        "required": ["id", "ok"],
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
                    "wait_s": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": MAX_WAIT_S,
                        "default": 0,
                        "description": "with nothing ready, wait up to this long for "
                        "jobs to come (a long poll), rather than answer none at once",
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
    "is ready (or the queue is paused, or its rate limit says wait) and `wait_s` "
    "passed: a claim with `wait_s` answers as soon as jobs come (an enqueue wakes "
    "it), or empty when the time is up.",
)
async def claim(app: App, request: Request, body: Any) -> Any:
    """Claim up to ``max`` ready jobs of the queue, leased for ``lease_s``; with
    ``wait_s``, wait up to that long for some to come."""
    given = require_object(body, "a claim")
    queue = request.path_params["queue"]
    try:
        check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None
    wait_s = check_wait(given.get("wait_s"))
    # a typo in a worker's queue is a 404 naming the known ones, not an empty claim
    # (a read of Redis on a miss: in the thread pool)
    await run_in_threadpool(require_known, request, queue)
    claims = Claims(app)
    asked = (queue, given.get("max"), given.get("lease_s"), given.get("worker"))
    deadline = time.monotonic() + wait_s
    while True:
        jobs, due_in_s = await run_in_threadpool(claims.claim, *asked)
        if jobs or not await _wait(claims, request, queue, deadline, due_in_s):
            break
    if jobs and await request.is_disconnected():
        # nobody to hand them to: back to the queue now, not after a lapsed lease
        await run_in_threadpool(claims.give_back, jobs)
        return {"jobs": []}
    return {"jobs": [job.to_json() for job in jobs]}


# A long-poll claim waits in slices of this, looking between them whether its client
# is still there; each slice holds a thread of its own small pool (WAITERS), never
# one of the server's.
WAIT_SLICE_S = 1.0
WAITERS = 100


async def _wait(
    claims: Claims, request: Request, queue: str, deadline: float, due_in_s: Optional[float]
) -> bool:
    """Wait until a wake-up on ``queue``, a job due (``due_in_s``) or ``deadline``;
    whether to claim again (False: the time is up, or the client went away)."""
    until = deadline if due_in_s is None else min(deadline, time.monotonic() + due_in_s)
    state = request.app.state
    if getattr(state, "claim_waiters", None) is None:  # made on the event loop, once
        state.claim_waiters = anyio.CapacityLimiter(WAITERS)
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return until < deadline  # a job came due: claim it
        woke = await anyio.to_thread.run_sync(
            claims.wait, queue, min(left, WAIT_SLICE_S), limiter=state.claim_waiters
        )
        if await request.is_disconnected():
            return False
        if woke:
            return True


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


_ACK_DONE = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "token": _TOKEN,
        "result": {},
        "result_ttl_s": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": ["id", "token"],
    "additionalProperties": False,
}
_ACK_FAIL = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "token": _TOKEN,
        "error": {"type": "string", "minLength": 1},
        "retry": {"type": "boolean", "default": True},
        "traceback": {"type": "string"},
    },
    "required": ["id", "token", "error"],
    "additionalProperties": False,
}


@ROUTES.route(
    "POST",
    "/queues/{queue}/ack",
    "Report many claimed jobs done or failed at once",
    reply(
        {
            "type": "object",
            "properties": {
                "applied": {"type": "integer", "description": "entries applied"},
                "done": {"type": "array", "items": ref("AckAnswer")},
                "fail": {"type": "array", "items": ref("AckAnswer")},
            },
            "required": ["applied", "done", "fail"],
        },
        "an answer per entry, in the request's order: applied, or refused and why",
    ),
    errors=("400", "404", "422"),
    said=SAID,
    body={
        **json_body(
            {
                "type": "object",
                "properties": {
                    "done": {"type": "array", "items": _ACK_DONE, "maxItems": MAX_ACK},
                    "fail": {"type": "array", "items": _ACK_FAIL, "maxItems": MAX_ACK},
                },
                "additionalProperties": False,
            },
            f"the jobs done and failed, of claims on this queue: 1 to {MAX_ACK} in all",
        ),
        "required": True,
    },
    description="Settles each job as its own done or fail call would, in one call "
    "to Redis per claim (the pool's ack): a result kept, a failure retried by its "
    "policy or dead. An entry whose claim holds its job no longer is refused in its "
    "answer (`lease_gone`) while the others apply. A malformed entry refuses the "
    "whole request (422, naming it), applying nothing.",
)
def ack(app: App, request: Request, body: Any) -> Any:
    """Settle many claimed jobs: done and failed."""
    given = require_object(body, "an ack")
    unknown = sorted(set(given) - {"done", "fail"})
    if unknown:
        raise HTTPError(422, f"an ack has unknown fields: {', '.join(unknown)}")
    done, fail = given.get("done", []), given.get("fail", [])
    for name, value in (("done", done), ("fail", fail)):
        if not isinstance(value, list):
            raise HTTPError(422, f"{name} must be an array, not {json_type(value)}")
    queue = request.path_params["queue"]
    try:
        check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None
    if len(done) + len(fail) > MAX_ACK:
        raise HTTPError(422, f"an ack settles at most {MAX_ACK} jobs, not {len(done) + len(fail)}")
    dones, fails = Claims(app).ack(queue, done, fail)
    applied = sum(1 for answer in (*dones, *fails) if answer["ok"])
    return {"applied": applied, "done": dones, "fail": fails}
