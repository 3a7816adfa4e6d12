"""The HTTP workers' OpenAPI entries describe their routes: one entry per route and
method, every reference resolvable, every error reply the app in front may give
documented (schemathesis holds the served document to the server once ``fastq
serve`` assembles it: tests/integration/test_serve_openapi.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from fastq.serve import workers


def refs(node: Any) -> set[str]:
    return set(re.findall(r'"\$ref": "#/components/schemas/([A-Za-z]+)"', json.dumps(node)))


def test_each_route_has_its_entry_and_each_entry_its_route() -> None:
    routes = {(re.sub(r":path\}", "}", r.path), m) for r in workers.ROUTES for m in r.methods or ()}
    documented = {
        (path, method.upper()) for path, item in workers.OPENAPI_PATHS.items() for method in item
    }
    assert documented == routes - {(path, "HEAD") for path, _ in routes}


def test_every_reference_resolves_and_every_refusal_is_documented() -> None:
    # Error is the serving app's schema ({"error": "..."}), the others are ours
    assert refs(workers.OPENAPI_PATHS) <= {*workers.OPENAPI_SCHEMAS, "Error"}
    assert refs(workers.OPENAPI_SCHEMAS) <= set(workers.OPENAPI_SCHEMAS)
    for path, item in workers.OPENAPI_PATHS.items():
        for operation in item.values():
            codes = set(operation["responses"])
            assert {"200", "400", "401", "422", "403", "404", "413", "415", "503"} <= codes, path
            assert ("409" in codes) == ("/jobs/" in path), path
