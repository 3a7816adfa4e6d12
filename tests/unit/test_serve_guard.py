"""The guard of ``fastq serve`` (token, body bound, body type) driven as ASGI, with
no server: what it refuses, and how little of a body it reads to refuse it."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import pytest

from fastq.serve.guard import Door, Guard, is_loopback_host

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
    method: str = "POST",
    root_path: str = "",
    stall: bool = False,
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
        if stall and calls > 1:  # a client that sent a chunk, then nothing more
            await asyncio.sleep(3600)
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": root_path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(guard(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    status = sent[0]["status"]
    if path.startswith("/api/"):  # every reply of the API, a refusal or the app's
        headers = dict(sent[0]["headers"])
        assert headers[b"x-content-type-options"] == b"nosniff"
        assert headers[b"cache-control"] == b"no-store"
    if status == 200:
        return status, body, calls
    return status, json.loads(body) if path.startswith("/api/") else body.decode(), calls


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_the_token_is_checked_before_the_body_is_read() -> None:
    app = Called()
    guard = Guard(app, Door(TOKEN), 100)
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
    guard = Guard(app, Door(TOKEN), 25)
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
    guard = Guard(app, Door(TOKEN), 100)
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
        status, reply, _ = run(guard, {**AUTH, "Content-Type": kind}, [b'{"a": 1}'])
        assert status == 415 and "Content-Type: application/json" in reply["error"]
    for kind in ("application/json", "application/json; charset=utf-8", "application/vnd.x+json"):
        assert run(guard, {**AUTH, "Content-Type": kind}, [b"{}"])[0] == 200
    # with no body too: a form POSTed by another site's page has no JSON type
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, reply, calls = run(guard, {**AUTH, "Content-Type": "text/plain"}, method=method)
        assert (status, calls) == (415, 0)
        assert reply["error"] == (
            f"a {method} to the API must say Content-Type: application/json, even with no body"
        )
        assert run(guard, {"Authorization": AUTH["Authorization"]}, method=method)[0] == 415
        assert run(guard, AUTH, method=method)[0] == 200
    for method in ("GET", "HEAD", "OPTIONS"):  # they change nothing
        assert run(guard, {"Authorization": AUTH["Authorization"]}, method=method)[0] == 200


def test_routes_outside_the_api_need_no_token_nor_json() -> None:
    app = Called()
    assert run(Guard(app, Door(TOKEN), 10), {}, [b"x" * 50], path="/login")[0] == 200
    # their bodies (the pages' forms) have a bound of their own
    status, reply, _ = run(Guard(app, Door(TOKEN), 10), {}, [b"x" * 70_000], path="/login")
    assert (status, reply) == (413, "the form is larger than 65,536 bytes\n")


CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port of localhost is another origin
    {"Origin": "https://evil.example"},
    {"Origin": "http://127.0.0.1:9999"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://127.0.0.1:8000"},
]


@pytest.mark.parametrize("token", [TOKEN, None])
@pytest.mark.parametrize("path", ["/api/v1/queues/default/pause", "/queues/default/pause"])
def test_a_request_from_another_site_is_refused_in_every_mode(
    token: Optional[str], path: str
) -> None:
    app = Called()
    guard = Guard(app, Door(token), 100)
    ok = {"Host": "127.0.0.1:8000", **AUTH}
    for said in CROSS_SITE:
        # the form a page on another site can send: no body, the form's type
        for kind in ("application/x-www-form-urlencoded", "application/json"):
            status, reply, calls = run(guard, {**ok, "Content-Type": kind, **said}, path=path)
            assert (status, calls) == (403, 0), said
            text = reply["error"] if isinstance(reply, dict) else reply
            assert "another site" in text
        # a GET changes nothing: a link from another site still opens a page
        assert run(guard, {**ok, **said}, path=path, method="GET")[0] == 200
    for same in ({"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}):
        assert run(guard, {**ok, **same}, path=path)[0] == 200
    assert run(guard, {**ok, "Origin": "http://127.0.0.1:8000"}, path=path)[0] == 200
    assert app.bodies == [b""] * 4 * 1 + [b""] * len(CROSS_SITE)


def test_a_body_that_comes_too_slowly_is_refused() -> None:
    app = Called()
    guard = Guard(app, Door(TOKEN), 100, body_timeout_s=0.2)
    status, reply, calls = run(guard, AUTH, [b"{", b"}"], stall=True)
    assert (status, calls) == (408, 2)
    assert reply["error"] == (
        "the request body did not all come within 0.2 s (fastq serve --client-timeout)"
    )
    assert app.bodies == []


@pytest.mark.parametrize("path", ["/api/v1/queues", "/queues/default"])
def test_without_a_token_only_requests_to_localhost_are_answered(path: str) -> None:
    app = Called()
    guard = Guard(app, Door(None), 100)
    local = {"Content-Type": "application/json", "Host": "127.0.0.1:8000"}
    assert run(guard, local, [b"{}"], path=path)[0] == 200
    status, reply, calls = run(guard, {**local, "Host": "evil.example"}, [b"{}"], path=path)
    assert (status, calls) == (403, 0) and "only requests to localhost" in str(reply)
    # behind a proxy, every request is addressed to localhost: none is taken
    for proxied in (
        {"X-Forwarded-For": "203.0.113.9"},
        {"X-Forwarded-Host": "fastq.example"},
        {"X-Forwarded-Proto": "https"},
        {"Forwarded": "for=203.0.113.9"},
        {"Via": "1.1 nginx"},
    ):
        status, reply, calls = run(guard, {**local, **proxied}, [b"{}"], path=path)
        assert (status, calls) == (403, 0) and "through a proxy" in str(reply), proxied
        assert run(guard, {**local, **proxied}, path=path, method="GET")[0] == 403
    # nor under a path prefix (a proxy's, or an app that mounts it)
    status, reply, _ = run(guard, local, [b"{}"], path="/fq" + path, root_path="/fq")
    assert status == 403 and "path prefix" in str(reply)
    assert app.bodies == [b"{}"]


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
