"""The OpenAPI 3.1 document of the HTTP API, made from the route declarations
(:class:`fastq.serve.api.endpoint.Routes`): each route's parameters, body and
replies, errors included, declared beside its handler, so that the document
cannot drift from the routes; a client of any language can be generated from it,
and schemathesis holds the server to it. It is served at ``/api/v1/openapi.json``.
"""

from __future__ import annotations

from typing import Any, Sequence

from starlette.requests import Request

from fastq._version import __version__
from fastq.app import App
from fastq.serve.api.endpoint import Routes
from fastq.serve.api.schemas import ERROR, Schema, reply

ROUTES = Routes()


@ROUTES.route(
    "GET", "/openapi.json", "This document", reply({"type": "object"}, "the OpenAPI document")
)
def openapi_json(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/openapi.json: the document (made once, by the app)."""
    return request.app.state.openapi


def document(tables: Sequence[Routes], prefix: str, max_body_bytes: int) -> Schema:
    """The OpenAPI document of the routes of ``tables``, mounted at ``prefix``."""
    paths: dict[str, Schema] = {}
    schemas: dict[str, Schema] = {"Error": ERROR}
    for table in tables:
        paths.update(table.openapi_paths(prefix))
        schemas.update(table.schemas)
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
