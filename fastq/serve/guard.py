"""The guard in front of every route: who may come in (:class:`Door`: the token,
the request's addressing, where it comes from, its type), and each request's body,
read whole within a bound of bytes and of time, before a handler runs (handlers
never check these).

An ASGI middleware of its own (not Starlette's ``BaseHTTPMiddleware``) so that it
can refuse a body while reading it: a ``Content-Length`` above the bound is refused
before a byte of the body is read, a chunked body as soon as it passes the bound,
and a body that comes too slowly when its time is up (408); what it read is handed
to the app as the request's body.

Cross-site requests are refused in every mode: a request that changes state (any
method but GET, HEAD and OPTIONS) must not come from another site, as the browser
says in ``Sec-Fetch-Site`` (``cross-site``, ``same-site``) or, where it sends none,
in an ``Origin`` that is not the server's own; and one to the API must say
``Content-Type: application/json``, even with no body, which no page can send across
origins without a CORS preflight that this server never grants.

Without a token (a server bound to loopback, see :mod:`fastq.cli.serve`) it takes
only requests addressed to a loopback name (``Host: localhost``, ``127.0.0.1``,
``[::1]``), so that a web page cannot reach it through a DNS name rebound to
127.0.0.1; and none that came through a proxy (``Forwarded``, ``X-Forwarded-*``,
``Via``) nor under a path prefix: a proxy in front of it would make it anyone's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import time
from typing import Any, Awaitable, Callable, Mapping, MutableMapping, Optional
from urllib.parse import urlsplit

import orjson

from fastq.serve.reply import problem

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# the default bound of a request's body to the API: a batch of 1,000 jobs of a few KiB
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# the bound of a body to the pages: their forms are a few fields
MAX_FORM_BYTES = 64 * 1024
# the default time a request's body may take to come, from its headers' end
DEFAULT_BODY_TIMEOUT_S = 30.0
API_PREFIX = "/api/"
# the methods that change nothing (the rules of cross-site requests skip them)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# the headers a proxy adds: a server with no token takes no request that has one
PROXY_HEADERS = (b"forwarded", b"via")

NO_TOKEN = (
    "this server has no token and answers only requests to localhost: "
    "start it with --token-file or $FASTQ_TOKEN to serve others"
)


class Door:
    """Who may come in: the rules of a request's headers, one set for the guard and
    for the API's endpoint, which checks them again (:func:`refusal`).

    Args:
        token: the bearer token every ``/api/`` request must carry; None: none
            (loopback only, see the module).
    """

    def __init__(self, token: Optional[str]) -> None:
        # kept as its digest: a token of another length then takes as long to refuse
        self.token = _digest(token.encode()) if token is not None else None

    def refusal(
        self, method: str, headers: Mapping[bytes, bytes], api: bool, root_path: str = ""
    ) -> Optional[tuple[int, str]]:
        """The refusal of a request by its method and headers (status, message), or
        None; ``api``: it is one to the API (the token, the JSON type)."""
        if self.token is None:
            if not is_loopback_host(headers.get(b"host", b"")):
                return 403, NO_TOKEN
            if root_path:
                return 403, (
                    "this server has no token and is not served under a path prefix "
                    "(--root-path): start it with --token-file or $FASTQ_TOKEN"
                )
            if any(name in headers for name in PROXY_HEADERS) or any(
                name.startswith(b"x-forwarded-") for name in headers
            ):
                return 403, (
                    "this server has no token and takes no request through a proxy "
                    "(Forwarded, X-Forwarded-*, Via): start it with --token-file or "
                    "$FASTQ_TOKEN to serve behind one"
                )
        if api and self.token is not None:
            given = headers.get(b"authorization")
            if given is None:
                return 401, "no token: send the header Authorization: Bearer <token>"
            scheme, _, value = given.partition(b" ")
            # compare_digest: the time taken says nothing of how much of it matched
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                _digest(value.strip()), self.token
            ):
                return 401, "wrong token: send the header Authorization: Bearer <token>"
        if method not in SAFE_METHODS:
            if is_cross_site(headers):
                return 403, "a request from another site is refused"
            if api and not _is_json(headers.get(b"content-type", b"")):
                return 415, (
                    f"a {method} to the API must say Content-Type: application/json, "
                    "even with no body"
                )
        return None


class Guard:
    """The ASGI middleware (see the module).

    Args:
        app: the app it guards.
        door: who may come in.
        max_body_bytes: a larger body to the API is refused with 413 (the pages'
            forms: :data:`MAX_FORM_BYTES`).
        body_timeout_s: a body that has not all come this long after its headers
            is refused with 408.
    """

    def __init__(
        self,
        app: ASGIApp,
        door: Door,
        max_body_bytes: int,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.door = door
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        api = path.startswith(API_PREFIX)
        headers = header_map(scope)
        refused = self.door.refusal(
            str(scope["method"]), headers, api, str(scope.get("root_path", ""))
        )
        bound = self.max_body_bytes if api else MAX_FORM_BYTES
        if refused is None:
            refused = _length_refusal(headers, bound, api)
        if refused is not None:
            await _refuse(send, api, *refused)
            return
        body = bytearray()
        deadline = time.monotonic() + self.body_timeout_s
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                await _refuse(send, api, 408, self._too_slow())
                return
            if message["type"] == "http.disconnect":
                return  # the client left: nobody to answer
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > bound:
                await _refuse(send, api, 413, too_large(bound, api))
                return
        await self.app(scope, _replay(bytes(body), receive), _hardened(send) if api else send)

    def _too_slow(self) -> str:
        return (
            f"the request body did not all come within {self.body_timeout_s:g} s "
            "(fastq serve --client-timeout)"
        )


def too_large(bound: int, api: bool) -> str:
    if not api:
        return f"the form is larger than {bound:,} bytes"
    return (
        f"the request body is larger than {bound:,} bytes "
        "(fastq serve --max-body): send the jobs in several requests"
    )


def _length_refusal(
    headers: Mapping[bytes, bytes], bound: int, api: bool
) -> Optional[tuple[int, str]]:
    length = headers.get(b"content-length")
    if length is None:
        return None
    if not (length.isdigit() and length.isascii()) or len(length) > 19:
        return 400, "Content-Length must be a whole number of bytes"
    if int(length) > bound:
        return 413, too_large(bound, api)
    return None


def route_path(scope: Scope) -> str:
    """The path routes match, as Starlette finds it: behind ``--root-path``
    (uvicorn puts the prefix in front of ``path`` too, and Starlette takes it off to
    route), without it, whether or not the prefix ends in ``/``; so that ``/api/``
    is guarded whatever the prefix. A path with an empty segment (``//``) is taken
    as if it had none: Starlette routes ``/api//v1`` nowhere, and the guard must not
    pass what it might route."""
    path = str(scope["path"])
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        if path == root:
            path = ""
        elif path[len(root)] == "/" or root.endswith("/"):
            path = path[len(root) :]
    path = "/" + "/".join(part for part in path.split("/") if part)
    return path


def is_cross_site(headers: Mapping[bytes, bytes]) -> bool:
    """Whether a browser says the request comes from another site: its
    ``Sec-Fetch-Site`` (which a page cannot forge) is ``cross-site`` or ``same-site``
    (another port or subdomain is another origin), or, from a browser that sends
    none, its ``Origin`` is not the ``Host`` it was sent to (``null`` included)."""
    fetch_site = headers.get(b"sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.strip().lower() not in (b"same-origin", b"none")
    origin = headers.get(b"origin")
    if origin is None:
        return False  # not a browser's (a browser sends Origin on every such request)
    try:
        netloc = urlsplit(origin.decode("latin-1").strip()).netloc.lower()
    except ValueError:
        return True
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    return not netloc or netloc != host


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


def header_map(scope: Scope) -> dict[bytes, bytes]:
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


async def _refuse(send: Send, api: bool, status: int, message: str) -> None:
    """A refusal: the API's JSON problem, or the pages' line of text."""
    if api:
        headers = [(b"content-type", b"application/json"), *_HARDENING]
        body = orjson.dumps(problem(message))
    else:
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
        body = message.encode() + b"\n"
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status in (408, 413):
        # the rest of the body is not read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
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
