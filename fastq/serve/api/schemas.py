"""The pieces of the OpenAPI document that routes share: how a schema is referred
to, made nullable or put in a body or a reply; the refusals and the one problem
shape (:data:`ERROR`); the schemas of queue names, job and batch ids, and of every
path parameter (:data:`PATH_PARAMETERS`: a route's path names its parameters, and
the document describes each from here, so none goes undocumented).

OpenAPI 3.1 schemas are JSON Schema: a field that may be null is
``{"type": ["string", "null"]}`` (no ``nullable``).
"""

from __future__ import annotations

from typing import Any

from fastq.validate import MAX_DELAY_S, MAX_JOB_ID_BYTES, MAX_QUEUE_NAME_CHARS

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null (a JSON null is taken as the field left out)."""
    kind = schema["type"]
    return {**schema, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}


def json_body(schema: Schema, description: str) -> Schema:
    return {
        "required": True,
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }


def reply(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


# the one problem shape: every refusal of the API (fastq.serve.reply.HTTPError)
ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "written": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the ids of this request that went in",
        },
        "state": {
            "type": "string",
            "description": "the job's or the batch's state (409): a batch's is closed, "
            "ended or unknown (never opened, or expired)",
        },
        "batch": {"type": "string", "description": "the batch refused (409)"},
    },
}

ERRORS = {
    "400": "the body is not JSON, or not of the expected kind",
    "401": "no bearer token, or a wrong one",
    "403": "a request from another site (Sec-Fetch-Site, Origin); or a server without a "
    "token and a request not addressed to localhost, or one through a proxy",
    "404": "no such job, queue or batch",
    "409": "the job, the queue or the batch is in another state than the request needs "
    "(a batch that takes no job: `batch` names it, `state` says why)",
    "413": "the body is larger than the server takes",
    "415": "a POST, PUT or DELETE without Content-Type: application/json (a body or none)",
    "422": "a value is invalid: the message names it",
    "503": "Redis could not be reached or refused the call; `written` lists the ids in",
}
# what the guard in front, or Redis, may answer to any request
EVERY_ROUTE = ("401", "403", "413", "415", "503")


def errors(codes: Any = (), said: Any = None) -> dict[str, Schema]:
    """The error replies of a route: those every route may give, and ``codes``;
    ``said``: what a code means for this route, where :data:`ERRORS` says too little."""
    words = {**ERRORS, **(said or {})}
    return {code: reply(ref("Error"), words[code]) for code in sorted({*EVERY_ROUTE, *codes})}


QUEUE_NAME: Schema = {
    "type": "string",
    "pattern": f"^[A-Za-z0-9_.\\-]{{1,{MAX_QUEUE_NAME_CHARS}}}$",
}
JOB_ID: Schema = {
    "type": "string",
    "pattern": f"^(?!fastq:)[!-~]{{1,{MAX_JOB_ID_BYTES}}}$",
    "description": "printable ASCII without whitespace; `fastq:` is reserved",
}
BATCH_ID: Schema = {
    **JOB_ID,
    "pattern": JOB_ID["pattern"].replace("[!-~]", "[!-z|~]"),
    "description": "printable ASCII without whitespace, `{` nor `}`; `fastq:` is reserved",
}
SECONDS: Schema = {"type": "number", "minimum": 0, "maximum": MAX_DELAY_S}

# every path parameter of the API, by its name in the routes' paths
PATH_PARAMETERS: dict[str, Schema] = {
    "queue": {"name": "queue", "in": "path", "required": True, "schema": QUEUE_NAME},
    "job_id": {"name": "job_id", "in": "path", "required": True, "schema": JOB_ID},
    "id": {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "the job's id: printable ASCII without whitespace",
        "schema": {"type": "string", "pattern": JOB_ID["pattern"]},
    },
    "batch_id": {"name": "batch_id", "in": "path", "required": True, "schema": BATCH_ID},
}
