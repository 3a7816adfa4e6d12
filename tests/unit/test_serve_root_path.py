"""Behind ``--root-path`` uvicorn puts the prefix in front of the request's path
too (Starlette takes it off to route): the guard must still see ``/api/`` there,
or the API would answer without its token."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastq.serve.guard import Door, Guard, route_path


@pytest.mark.parametrize(
    ("path", "root", "seen"),
    [
        ("/fastq/api/v1/queues", "/fastq", "/api/v1/queues"),
        ("/fastq/api/v1/queues", "/fastq/", "/api/v1/queues"),
        ("/fastq", "/fastq", "/"),
        # a prefix ending in / (an app embedded at /fastq/): the path Starlette routes
        ("/fastq//api/v1/queues", "/fastq/", "/api/v1/queues"),
        ("/api//v1/queues", "", "/api/v1/queues"),
        ("/api/v1/queues", "", "/api/v1/queues"),
        ("/fastqx/api/v1/queues", "/fastq", "/fastqx/api/v1/queues"),
    ],
)
def test_route_path_takes_the_prefix_off(path: str, root: str, seen: str) -> None:
    assert route_path({"path": path, "root_path": root}) == seen


def test_the_api_under_a_root_path_is_refused_without_its_token() -> None:
    called: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope["path"])

    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    guard = Guard(app, Door("s3cret-token-0123456789"), 1024)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/fastq/api/v1/queues",
        "root_path": "/fastq",
        "headers": [],
    }
    asyncio.run(guard(scope, receive, send))
    assert called == []
    assert sent[0]["status"] == 401
