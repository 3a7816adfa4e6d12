"""The OpenAPI 3.1 document of the HTTP API, written by hand: each route's
parameters, body and replies, errors included, so that a client of any language
can be generated from it and schemathesis can hold the server to it.

OpenAPI 3.1 schemas are JSON Schema: a field that may be null is
``{"type": ["string", "null"]}`` (no ``nullable``). The HTTP workers' paths and
schemas (``fastq.serve.api.workers``) are merged in by :func:`document`.
"""

from __future__ import annotations

from typing import Any

from fastq._version import __version__
from fastq.serve.api.enqueue import MAX_JOBS_PER_REQUEST
from fastq.validate import (
    MAX_DELAY_S,
    MAX_JOB_ID_BYTES,
    MAX_PRIORITY,
    MAX_QUEUE_NAME_CHARS,
    MAX_RATE,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_UNIQUE_KEY_CHARS,
    UNIQUE_UNTIL,
)

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


ERRORS = {
    "400": "the body is not JSON, or not of the expected kind",
    "401": "no bearer token, or a wrong one",
    "403": "a server without a token answers only requests to localhost",
    "404": "no such job, queue or batch",
    "409": "the job, the queue or the batch is in another state than the request needs "
    "(a batch that takes no job: `batch` names it, `state` says why)",
    "413": "the body is larger than the server takes",
    "415": "a body that is not Content-Type: application/json",
    "422": "a value is invalid: the message names it",
    "503": "Redis could not be reached or refused the call; `written` lists the ids in",
}


def errors(*codes: str) -> dict[str, Schema]:
    """The error replies of a route: those every route may give, and ``codes``."""
    every = ("401", "403", "413", "415", "503")
    return {code: reply(ref("Error"), ERRORS[code]) for code in sorted({*every, *codes})}


QUEUE_NAME: Schema = {
    "type": "string",
    "pattern": f"^[A-Za-z0-9_.\\-]{{1,{MAX_QUEUE_NAME_CHARS}}}$",
}
JOB_ID: Schema = {
    "type": "string",
    "pattern": f"^(?!fastq:)[!-~]{{1,{MAX_JOB_ID_BYTES}}}$",
    "description": "printable ASCII without whitespace; `fastq:` is reserved",
}
SECONDS: Schema = {"type": "number", "minimum": 0, "maximum": MAX_DELAY_S}

SCHEMAS: dict[str, Schema] = {
    "Error": {
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
    },
    "Job": {
        "type": "object",
        "description": "A job to enqueue: its call, and any enqueue option (null: left out).",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "the registered job name"},
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
    "RateLimit": {
        "type": "object",
        "required": ["name", "rate_limit"],
        "properties": {
            "name": {"type": "string"},
            "rate_limit": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["rate", "per_s", "burst"],
                        "properties": {
                            "rate": {"type": "integer"},
                            "per_s": {"type": "number"},
                            "burst": {"type": "integer"},
                        },
                    },
                ]
            },
        },
    },
}

QUEUE_PARAM = {"name": "queue", "in": "path", "required": True, "schema": QUEUE_NAME}
JOB_PARAMS = [
    {"name": "job_id", "in": "path", "required": True, "schema": JOB_ID},
    {
        "name": "queue",
        "in": "query",
        "required": False,
        "schema": QUEUE_NAME,
        "description": "the job's queue; without it every known queue is searched",
    },
]


def _op(summary: str, ok: Schema, *codes: str, **more: Any) -> Schema:
    return {"summary": summary, "responses": {"200": ok, **errors(*codes)}, **more}


PRODUCER_PATHS: dict[str, Schema] = {
    "/api/v1/queues": {
        "get": _op("Every known queue with its stats", reply(ref("Queues"), "the queues")),
    },
    "/api/v1/queues/{queue}": {
        "parameters": [QUEUE_PARAM],
        "get": _op("A queue's stats", reply(ref("QueueStats"), "its stats"), "404", "422"),
    },
    "/api/v1/queues/{queue}/jobs": {
        "parameters": [QUEUE_PARAM],
        "post": _op(
            "Enqueue one job or an array of them",
            reply(ref("Enqueued"), "the jobs' ids"),
            "400",
            "404",
            "409",
            "422",
            requestBody=json_body(
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
        ),
    },
    "/api/v1/queues/{queue}/pause": {
        "parameters": [QUEUE_PARAM],
        "post": _op(
            "Stop workers claiming from the queue", reply(ref("Paused"), "paused"), "404", "422"
        ),
    },
    "/api/v1/queues/{queue}/resume": {
        "parameters": [QUEUE_PARAM],
        "post": _op(
            "Let workers claim from the queue again", reply(ref("Paused"), "resumed"), "404", "422"
        ),
    },
    "/api/v1/queues/{queue}/rate_limit": {
        "parameters": [QUEUE_PARAM],
        "put": _op(
            "Set or lift the queue's rate limit",
            reply(ref("RateLimit"), "the limit now"),
            "400",
            "404",
            "422",
            requestBody=json_body(ref("RateLimitRequest"), "the limit; rate null lifts it"),
        ),
    },
    "/api/v1/jobs/{job_id}": {
        "parameters": JOB_PARAMS,
        "get": _op(
            "A job's state, attempts, error, progress and result",
            reply(ref("JobState"), "the job"),
            "404",
            "422",
        ),
        "delete": _op(
            "Cancel a job yet to end",
            reply(ref("Cancelled"), "what was cancelled"),
            "404",
            "409",
            "422",
        ),
    },
    "/api/v1/openapi.json": {
        "get": _op("This document", reply({"type": "object"}, "the OpenAPI document")),
    },
}


def document(paths: dict[str, Schema], schemas: dict[str, Schema], max_body_bytes: int) -> Schema:
    """The OpenAPI document of ``paths`` (with their ``schemas``)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fastq",
            "version": __version__,
            "description": (
                "fastq's HTTP API: enqueue and read jobs, and run them, from any language. "
                "Every route needs `Authorization: Bearer <token>`; request bodies are "
                f"JSON (Content-Type: application/json) of at most {max_body_bytes:,} bytes. "
                'Errors are `{"error": "..."}`.'
            ),
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
