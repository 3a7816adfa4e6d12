"""The guard of ``fastq serve`` (token, body bound, body type) driven as ASGI, with
no server: what it refuses, and how little of a body it reads to refuse it."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import pytest

from fastq.serve.guard import Guard, is_loopback_host

TOKEN = "s3cret-token-0123456789"


class Called:
    """The guarded app: records the body it was given."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(
    guard: Guard,
    headers: dict[str, str],
    chunks: Optional[list[bytes]] = None,
    path: str = "/api/v1/queues",
    endless: bool = False,
) -> tuple[int, Any, int]:
    """One request through ``guard``: (status, JSON reply or body, receive calls)."""
    pending = list(chunks or [b""])
    calls = 0
    sent: list[Any] = []

    async def receive() -> Any:
        nonlocal calls
        calls += 1
        if endless:
            return {"type": "http.request", "body": b"x" * 10, "more_body": True}
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(guard(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    status = sent[0]["status"]
    if path.startswith("/api/"):  # every reply of the API, a refusal or the app's
        headers = dict(sent[0]["headers"])
        assert headers[b"x-content-type-options"] == b"nosniff"
        assert headers[b"cache-control"] == b"no-store"
    return status, json.loads(body) if status != 200 else body, calls


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_the_token_is_checked_before_the_body_is_read() -> None:
    app = Called()
    guard = Guard(app, TOKEN, 100)
    for headers, said in (
        ({}, "no token"),
        ({"Authorization": "Bearer nope"}, "wrong token"),
        ({"Authorization": f"Basic {TOKEN}"}, "wrong token"),
        ({"Authorization": f"Bearer {TOKEN}x"}, "wrong token"),
        ({"Authorization": f"bearer{TOKEN}"}, "wrong token"),
    ):
        status, reply, calls = run(guard, headers, [b'{"a": 1}'])
        assert (status, calls) == (401, 0)
        assert reply["error"].startswith(said) and TOKEN not in reply["error"]
    assert run(guard, {**AUTH, "Authorization": f"bearer  {TOKEN} "}, [b"{}"])[0] == 200
    assert app.bodies == [b"{}"]


def test_a_body_over_the_bound_is_refused_while_it_is_read() -> None:
    app = Called()
    guard = Guard(app, TOKEN, 25)
    # a Content-Length over the bound: not a byte read
    status, reply, calls = run(guard, {**AUTH, "Content-Length": "26"}, [b"x" * 26])
    assert (status, calls) == (413, 0)
    assert reply == {
        "error": "the request body is larger than 25 bytes (fastq serve "
        "--max-body): send the jobs in several requests"
    }
    # no length, a body without end: refused after the chunk that passed the bound
    status, _, calls = run(guard, AUTH, endless=True)
    assert (status, calls) == (413, 3)
    assert run(guard, {**AUTH, "Content-Length": "x1"}, [b"{}"])[0] == 400
    # up to the bound: the app gets the whole body, in one piece
    status, _, _ = run(guard, AUTH, [b"[1, ", b"2, 3", b"]" + b" " * 16])
    assert status == 200 and app.bodies == [b"[1, 2, 3]" + b" " * 16]


def test_a_body_must_be_json() -> None:
    app = Called()
    guard = Guard(app, TOKEN, 100)
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
        status, reply, _ = run(guard, {**AUTH, "Content-Type": kind}, [b'{"a": 1}'])
        assert status == 415 and "Content-Type: application/json" in reply["error"]
    for kind in ("application/json", "application/json; charset=utf-8", "application/vnd.x+json"):
        assert run(guard, {**AUTH, "Content-Type": kind}, [b"{}"])[0] == 200
    assert run(guard, {**AUTH, "Content-Type": "text/plain"}, [b""])[0] == 200  # no body


def test_routes_outside_the_api_are_not_guarded() -> None:
    app = Called()
    assert run(Guard(app, TOKEN, 10), {}, [b"x" * 50], path="/health")[0] == 200


def test_without_a_token_only_requests_to_localhost_are_answered() -> None:
    app = Called()
    guard = Guard(app, None, 100)
    json_type = {"Content-Type": "application/json"}
    assert run(guard, {**json_type, "Host": "127.0.0.1:8000"}, [b"{}"])[0] == 200
    status, reply, calls = run(guard, {**json_type, "Host": "evil.example"}, [b"{}"])
    assert (status, calls) == (403, 0) and "only requests to localhost" in reply["error"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST:8000", True),
        ("localhost.", True),
        ("127.0.0.1", True),
        ("127.0.0.1:80", True),
        ("127.1.2.3:9", True),
        ("[::1]", True),
        ("[::1]:8000", True),
        ("::1", True),
        ("", False),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example:80", False),
        ("10.0.0.1", False),
        ("[::2]:80", False),
        ("[::1", False),
        ("0.0.0.0", False),
        ("127.0.0.1:80:80", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host.encode()) is loopback
