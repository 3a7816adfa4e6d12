"""The guard in front of every ``/api/`` route: the bearer token, the body's bound,
and the body's type, checked before a handler runs (handlers never check them).

An ASGI middleware of its own (not Starlette's ``BaseHTTPMiddleware``) so that it
can refuse a body while reading it: a ``Content-Length`` above the bound is
refused before a byte of the body is read, and a chunked body as soon as it
passes the bound; what it read is handed to the app as the request's body.

Without a token (a server bound to loopback, see :mod:`fastq.cli.serve`) it takes
only requests addressed to a loopback name (``Host: localhost``, ``127.0.0.1``,
``[::1]``): a web page that a browser opened cannot reach the API through a DNS
name rebound to 127.0.0.1. Bodies must say ``Content-Type: application/json``,
which no browser sends across origins without asking first (a CORS preflight,
which this server never grants).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Any, Awaitable, Callable, MutableMapping, Optional

import orjson

from fastq.serve.reply import problem

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# the default bound of a request's body: a batch of 1,000 jobs of a few KiB each
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
API_PREFIX = "/api/"


class Guard:
    """The ASGI middleware: token, body bound, body type (see the module).

    Args:
        app: the app it guards.
        token: the bearer token every ``/api/`` request must carry; None: none
            (loopback only: requests must be addressed to a loopback name).
        max_body_bytes: a larger body is refused with 413.
    """

    def __init__(self, app: ASGIApp, token: Optional[str], max_body_bytes: int) -> None:
        self.app = app
        # kept as its digest: a token of another length then takes as long to refuse
        self.token = _digest(token.encode()) if token is not None else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not route_path(scope).startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refused = self.check_headers(headers)
        if refused is not None:
            await _refuse(send, *refused)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nobody to answer
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.max_body_bytes:
                await _refuse(send, 413, self._too_large())
                return
        if body.strip() and not _is_json(headers.get(b"content-type", b"")):
            await _refuse(
                send, 415, "a request body must be JSON: send Content-Type: application/json"
            )
            return
        await self.app(scope, _replay(bytes(body), receive), _hardened(send))

    def check_headers(self, headers: dict[bytes, bytes]) -> Optional[tuple[int, str]]:
        """The refusal of a request by its headers alone (status, message), or None."""
        if self.token is None:
            if not is_loopback_host(headers.get(b"host", b"")):
                return 403, (
                    "this server has no token and answers only requests to localhost: "
                    "start it with --token-file or $FASTQ_TOKEN to serve others"
                )
        else:
            given = headers.get(b"authorization")
            if given is None:
                return 401, "no token: send the header Authorization: Bearer <token>"
            scheme, _, value = given.partition(b" ")
            # compare_digest: the time taken says nothing of how much of it matched
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                _digest(value.strip()), self.token
            ):
                return 401, "wrong token: send the header Authorization: Bearer <token>"
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return 400, "Content-Length must be a whole number of bytes"
            if int(length) > self.max_body_bytes:
                return 413, self._too_large()
        return None

    def _too_large(self) -> str:
        return (
            f"the request body is larger than {self.max_body_bytes:,} bytes "
            "(fastq serve --max-body): send the jobs in several requests"
        )


def route_path(scope: Scope) -> str:
    """The path routes match: behind ``--root-path`` (uvicorn puts the prefix in
    front of ``path`` too, and Starlette takes it off to route), without it; so that
    ``/api/`` is guarded whatever the prefix."""
    path = str(scope["path"])
    root = str(scope.get("root_path", "")).rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :]
    return path


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


# on every reply of the API: what it answers is data, not a page (a browser must not
# guess another type), and never a proxy's or a browser's to keep
_HARDENING = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def _hardened(send: Send) -> Send:
    async def hardened(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *_HARDENING]}
        await send(message)

    return hardened


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name; of a repeated one, the first."""
    out: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(bytes(name).lower(), bytes(value))
    return out


def _is_json(content_type: bytes) -> bool:
    main = content_type.split(b";", 1)[0].strip().lower()
    return main == b"application/json" or (
        main.startswith(b"application/") and main.endswith(b"+json")
    )


def is_loopback_host(host: bytes) -> bool:
    """Whether a Host header names this machine's loopback: ``localhost``,
    ``127.x.x.x`` or ``[::1]``, with or without a port."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        name = text[1 : text.find("]")] if "]" in text else ""
    else:
        name = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


async def _refuse(send: Send, status: int, message: str) -> None:
    headers = [(b"content-type", b"application/json"), *_HARDENING]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 413:
        # the rest of the body is not read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    body = orjson.dumps(problem(message))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body read already, then waits on the
    client's as before (for a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
