"""The OpenAPI document describes the routes the server has: one entry per route
and method of the API, every reference resolvable, every refusal the guard in front
may give documented (schemathesis holds the served document to the server:
tests/integration/test_serve_openapi.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.routing import Mount, Route

import fastq
from fastq.serve.app import create_app

APP = create_app(fastq.App("redis://127.0.0.1:1/0"), "a-token-of-20-chars-x")
DOCUMENT: dict[str, Any] = APP.state.openapi


def refs(node: Any) -> set[str]:
    return set(re.findall(r'"\$ref": "#/components/schemas/([A-Za-z]+)"', json.dumps(node)))


def operations() -> dict[tuple[str, str], Any]:
    return {
        (path, method.upper()): operation
        for path, item in DOCUMENT["paths"].items()
        for method, operation in item.items()
        if method != "parameters"
    }


def test_each_route_has_its_entry_and_each_entry_its_route() -> None:
    (api,) = [r for r in APP.routes if isinstance(r, Mount) and r.name == "api"]
    routes = {
        (api.path + re.sub(r":path\}", "}", r.path), method)
        for r in api.routes
        if isinstance(r, Route)
        for method in r.methods or ()
        if method != "HEAD"
    }
    assert set(operations()) == routes


def test_every_reference_resolves_and_every_refusal_is_documented() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    assert refs(DOCUMENT["paths"]) <= set(schemas)
    assert refs(schemas) <= set(schemas)
    for (path, method), operation in operations().items():
        codes = set(operation["responses"])
        assert {"200", "401", "403", "413", "415", "503"} <= codes, (path, method)
        if operation.get("tags") == ["workers"]:
            assert {"400", "404", "422"} <= codes, path
            assert ("409" in codes) == ("/jobs/" in path), path
