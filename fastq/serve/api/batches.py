"""The batches' routes: open a batch, read its status, list the latest, close one,
cancel one (:mod:`fastq.producer.batches`); jobs join a batch through the enqueue
route's ``"batch"`` field (:mod:`fastq.serve.api.enqueue`). Each is declared in
:data:`ROUTES` with its OpenAPI entry, and runs in the thread pool
(:mod:`fastq.serve.api.endpoint`).

A batch opened over HTTP stays open (``close=False``): the client adds its jobs in
as many requests as it likes, then closes it (``POST .../close``); it ends once
its jobs have, and its callbacks are enqueued then.
"""

from __future__ import annotations

from typing import Any, Optional

from starlette.requests import Request

from fastq.app import App
from fastq.errors import BatchClosed
from fastq.protocol.batches import BatchStatus
from fastq.serve.api.endpoint import Routes, json_type, require_object
from fastq.serve.api.enqueue import check_batch_id
from fastq.serve.api.schemas import BATCH_ID, Schema, json_body, nullable, ref, reply
from fastq.serve.reply import HTTPError

# batches a listing holds at most (GET /api/v1/batches?limit=)
MAX_LIST = 1000
DEFAULT_LIST = 100
# a batch's description, at most (it is shown with its status, and given to callbacks)
MAX_DESCRIPTION_CHARS = 1000
OPEN_FIELDS = ("description", "on_complete", "on_success", "meta", "id")


TIME = nullable({"type": "number", "description": "Unix seconds"})

# the schemas its routes refer to
SCHEMAS: dict[str, Schema] = {
    "BatchStatus": {
        "type": "object",
        "description": "A batch as it stands (`app.batch_status(id)`); `pending` jobs have "
        "not ended yet; `failed` counts the jobs that failed at least once, whatever "
        "their end; a cancelled batch whose jobs have all ended is `ended`, with "
        "`cancelled_at` set.",
        "required": list(BatchStatus("", "open").as_dict()),
        "properties": {
            "id": {"type": "string"},
            "state": {"enum": ["open", "closed", "cancelled", "ended"]},
            "description": {"type": "string"},
            **{
                count: {"type": "integer", "minimum": 0}
                for count in ("total", "pending", "done", "failed", "dead", "cancelled")
            },
            "started_at": TIME,
            "closed_at": TIME,
            "cancelled_at": TIME,
            "ended_at": TIME,
            "parent": nullable({"type": "string", "description": "the batch holding this one"}),
            "queues": {"type": "array", "items": {"type": "string"}},
            "children": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the batches it holds",
            },
            "callbacks": {
                "type": "object",
                "description": "`complete` and `success`: the job each enqueues",
                "additionalProperties": {"type": "string"},
            },
        },
    },
    "Batches": {
        "type": "object",
        "required": ["batches"],
        "properties": {"batches": {"type": "array", "items": ref("BatchStatus")}},
    },
    "BatchRequest": {
        "type": "object",
        "description": "A batch to open (null: left out). It stays open: jobs join it "
        'through the enqueue route\'s `"batch"`; close it when they are in.',
        "additionalProperties": False,
        "properties": {
            "description": nullable({"type": "string", "maxLength": MAX_DESCRIPTION_CHARS}),
            "on_complete": nullable(
                {
                    "type": "string",
                    "minLength": 1,
                    "description": "a job enqueued once every job has ended, with the "
                    "batch's status as its one argument",
                }
            ),
            "on_success": nullable(
                {
                    "type": "string",
                    "minLength": 1,
                    "description": "a job enqueued once every job has succeeded (never "
                    "if one died or the batch was cancelled)",
                }
            ),
            "meta": {"description": "any JSON, handed to the callbacks with the status"},
            "id": nullable(
                {
                    **BATCH_ID,
                    "description": "the batch's id (an open batch of this id is joined); "
                    "default: a fresh one",
                }
            ),
        },
    },
    "BatchCancelled": {
        "type": "object",
        "required": ["jobs_cancelled", "batch"],
        "properties": {
            "jobs_cancelled": {
                "type": "integer",
                "description": "waiting jobs that will never run (those running finish)",
            },
            "batch": ref("BatchStatus"),
        },
    },
}

LIMIT_PARAM = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": DEFAULT_LIST},
    "description": "batches to list at most",
}

# the batches' routes, each declared beside its handler below
ROUTES = Routes(SCHEMAS)


def _batch_id(request: Request) -> str:
    try:
        return check_batch_id(request.path_params["batch_id"])
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


def _no_batch(batch_id: str) -> HTTPError:
    return HTTPError(
        404,
        f"no batch {batch_id!r}: never opened, or it expired (a batch is kept 7 days "
        "after it ended)",
    )


def _status(app: App, batch_id: str) -> dict[str, Any]:
    status: Optional[BatchStatus] = app.batch_status(batch_id)
    if status is None:
        raise _no_batch(batch_id)
    return status.as_dict()


def _callback(app: App, given: dict[str, Any], field: str) -> Optional[str]:
    """A callback's job name, checked as far as the server's app knows it: a job it
    registers must take the batch's status as its one argument (else it could never
    be enqueued, and the batch's end would be tried again and again)."""
    name = given.get(field)
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise HTTPError(422, f"{field}: a job's name (a non-empty string), not {json_type(name)}")
    jobdef = app.registry.get(name)
    if jobdef is not None:
        try:
            jobdef.arg_checker.check([{}], {})
        except (TypeError, ValueError) as exc:
            raise HTTPError(
                422, f"{field}: job {name!r} must take one argument, the batch's status: {exc}"
            ) from None
    return name


@ROUTES.route(
    "POST",
    "/batches",
    "Open a batch (left open: close it once its jobs are in)",
    reply(ref("BatchStatus"), "the batch, open"),
    errors=("400", "409", "422"),
    body={**json_body(ref("BatchRequest"), "the batch"), "required": False},
)
def open_batch(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/batches: open a batch (left open: close it when its jobs are in)."""
    given = require_object(body, "a batch")
    unknown = [key for key in given if key not in OPEN_FIELDS]
    if unknown:
        raise HTTPError(422, f"{unknown[0]}: unknown field (fields: {', '.join(OPEN_FIELDS)})")
    description = given.get("description")
    description = "" if description is None else description
    if not isinstance(description, str):
        raise HTTPError(422, f"description: must be a string, not {json_type(description)}")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise HTTPError(
            422,
            f"description: {len(description):,} characters, more than {MAX_DESCRIPTION_CHARS:,}",
        )
    batch_id = given.get("id")
    if batch_id is not None:
        try:
            check_batch_id(batch_id)
        except (TypeError, ValueError) as exc:
            raise HTTPError(422, f"id: {exc}") from None
    on_complete = _callback(app, given, "on_complete")
    on_success = _callback(app, given, "on_success")
    batch = app.batch(
        on_complete,
        on_success,
        description=description,
        meta=given.get("meta"),
        id=batch_id,
        close=False,
    )
    return _status(app, batch.id)


@ROUTES.route(
    "GET",
    "/batches",
    "The latest batches opened, newest first",
    reply(ref("Batches"), "their statuses"),
    errors=("422",),
    query=[LIMIT_PARAM],
)
def list_batches(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/batches: the latest batches opened, newest first."""
    unknown = [key for key in request.query_params if key != "limit"]
    if unknown:
        raise HTTPError(422, f"{unknown[0]!r}: unknown query parameter (parameters: limit)")
    text = request.query_params.get("limit")
    limit = DEFAULT_LIST
    if text is not None:
        digits = text.isascii() and text.isdigit() and len(text) < 10  # not '²'
        if not digits or not 1 <= int(text) <= MAX_LIST:
            raise HTTPError(422, f"limit: an integer within 1..{MAX_LIST}, not {text!r}")
        limit = int(text)
    return {"batches": [status.as_dict() for status in app.list_batches(limit)]}


@ROUTES.route(
    "GET",
    "/batches/{batch_id:path}",
    "A batch's state, counts and times",
    reply(ref("BatchStatus"), "the batch"),
    errors=("404", "422"),
)
def batch_status(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/batches/{id}: its state, counts and times."""
    return _status(app, _batch_id(request))


@ROUTES.route(
    "POST",
    "/batches/{batch_id:path}/close",
    "Close a batch: no job joins it now; it ends once its jobs have",
    reply(ref("BatchStatus"), "the batch, closed (or ended)"),
    errors=("404", "422"),
)
def close_batch(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/batches/{id}/close: no job joins it from now; it ends once its
    jobs have (at once, if they all have)."""
    batch_id = _batch_id(request)
    try:
        app.close_batch(batch_id)
    except BatchClosed:
        raise _no_batch(batch_id) from None
    return _status(app, batch_id)


@ROUTES.route(
    "POST",
    "/batches/{batch_id:path}/cancel",
    "Cancel a batch: its waiting jobs never run, those running finish",
    reply(ref("BatchCancelled"), "what was cancelled, and the batch now"),
    errors=("404", "409", "422"),
)
def cancel_batch(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/batches/{id}/cancel: its waiting jobs never run, those running
    finish; a batch that ended is a 409."""
    batch_id = _batch_id(request)
    before = _status(app, batch_id)
    if before["state"] == "ended":
        raise HTTPError(
            409, f"batch {batch_id!r} has ended: nothing to cancel", batch=batch_id, state="ended"
        )
    try:
        cancelled = app.cancel_batch(batch_id)
    except BatchClosed:  # it expired in between
        raise _no_batch(batch_id) from None
    return {"jobs_cancelled": cancelled, "batch": _status(app, batch_id)}
