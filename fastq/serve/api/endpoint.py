"""How every route of the API is written: declared in a :class:`Routes` table
beside its handler (``@ROUTES.route("POST", "/queues/{queue}/pause", summary, ok,
errors=...)``: its method, path and OpenAPI entry in one place), and served by one
endpoint, which reads the request's JSON (:func:`parse_json`), runs the handler off
the event loop, and answers what it returns as JSON
(:class:`fastq.serve.reply.JSONReply`) or what it raised as the one refusal
(:class:`fastq.serve.reply.HTTPError`; :func:`refusal` maps fastq's errors onto
it).

fastq's calls block on Redis (redis-py, synchronous), so a handler never makes
one on the event loop: the endpoint reads the request there (the guard has
already buffered its body) and runs the handler in Starlette's thread pool
(``run_in_threadpool``), where it calls the :class:`fastq.App` freely.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Sequence

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from fastq.app import App
from fastq.errors import (
    BatchClosed,
    EnqueueError,
    RedisRefused,
    RedisUnavailable,
    ShardCountMismatch,
    UnknownQueue,
)
from fastq.serve.api import schemas
from fastq.serve.api.schemas import Schema
from fastq.serve.guard import Door, header_map
from fastq.serve.reply import HTTPError, JSONReply, error_reply

log = logging.getLogger("fastq.serve")

# the request had no body (a handler told "no body" from an empty JSON value)
NO_BODY: Any = object()


def fastq_app(request: Request) -> App:
    """The :class:`fastq.App` the server was made for."""
    app: App = request.app.state.fastq
    return app


def parse_json(body: bytes) -> Any:
    """The request's JSON (:data:`NO_BODY` for an empty body; a body of blanks is
    no JSON).

    Read by the standard library, not orjson, which turns an integer beyond 64 bits
    into a float without a word: kept whole, such a number is refused where it is
    sent (the envelope's encoder names it). ``NaN`` and ``Infinity`` are refused.

    Raises:
        HTTPError: 400, the body is not JSON.
    """
    if not body:
        return NO_BODY
    try:
        return json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise HTTPError(400, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HTTPError(400, "the body's JSON is nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# a handler: called in the thread pool; or a coroutine function, awaited on the event
# loop, that sends its own blocking calls to threads (a long-poll claim, which waits
# with no thread of the pool held)
Handler = Callable[[App, Request, Any], Any]


@dataclass(frozen=True)
class Operation:
    """One method of one route: its handler, whether it reads a body, and what the
    OpenAPI document says of it (its operation object)."""

    method: str
    handler: Handler
    takes_body: bool
    doc: Schema


class Routes:
    """A table of routes of the API, each declared once, beside its handler, with
    what the OpenAPI document says of it (:meth:`route`); the Starlette routes
    (:meth:`starlette_routes`) and the document's paths (:meth:`openapi_paths`) are
    both made from it, so that neither can drift from the other.

    Args:
        schemas: the named schemas its routes refer to (``ref(name)``).
        tags: the OpenAPI tags of its operations.
    """

    def __init__(self, schemas: Optional[dict[str, Schema]] = None, tags: Sequence[str] = ()):
        self.schemas = dict(schemas or {})
        self.tags = list(tags)
        self.paths: dict[str, list[Operation]] = {}
        self.route_classes: dict[str, type[Route]] = {}

    def route(
        self,
        method: str,
        path: str,
        summary: str,
        ok: Schema,
        *,
        errors: Sequence[str] = (),
        said: Optional[dict[str, str]] = None,
        body: Optional[Schema] = None,
        query: Sequence[Schema] = (),
        description: Optional[str] = None,
        route_class: type[Route] = Route,
    ) -> Callable[[Handler], Handler]:
        """Declare ``handler(app, request, body)`` as ``method`` of ``path`` (under
        ``/api/v1``, as Starlette routes it: ``{job_id:path}``).

        Args:
            summary: the operation's summary.
            ok: its 200 reply (:func:`~fastq.serve.api.schemas.reply`).
            errors: the codes of its refusals, beyond those of every route
                (:data:`~fastq.serve.api.schemas.EVERY_ROUTE`); ``said``: what a
                code means here, where the common words say too little.
            body: its request body (:func:`~fastq.serve.api.schemas.json_body`);
                None: it reads none (a body sent is ignored).
            query: its query parameters.
            description: the operation's description.
            route_class: the Starlette route of the path (every method of a path
                shares one route, so that a 405 names them all).
        """

        def declare(handler: Handler) -> Handler:
            doc: Schema = {"summary": summary}
            if description is not None:
                doc["description"] = description
            if self.tags:
                doc["tags"] = list(self.tags)
            if query:
                doc["parameters"] = list(query)
            if body is not None:
                doc["requestBody"] = body
            doc["responses"] = {"200": ok, **schemas.errors(errors, said)}
            operation = Operation(method, handler, body is not None, doc)
            self.paths.setdefault(path, []).append(operation)
            if route_class is not Route:
                self.route_classes[path] = route_class
            return handler

        return declare

    def starlette_routes(self) -> list[BaseRoute]:
        """A Starlette route per path, with all its methods."""
        return [
            self.route_classes.get(path, Route)(
                path,
                _endpoint({op.method: op for op in operations}),
                methods=[op.method for op in operations],
            )
            for path, operations in self.paths.items()
        ]

    def openapi_paths(self, prefix: str) -> dict[str, Schema]:
        """The document's paths of these routes under ``prefix``: each path's
        parameters (:data:`~fastq.serve.api.schemas.PATH_PARAMETERS`, by the
        names its path holds), and an operation per method."""
        out: dict[str, Schema] = {}
        for path, operations in self.paths.items():
            names = re.findall(r"\{(\w+)(?::\w+)?\}", path)
            item: Schema = {}
            if names:
                item["parameters"] = [schemas.PATH_PARAMETERS[name] for name in names]
            for op in operations:
                item[op.method.lower()] = op.doc
            out[prefix + re.sub(r"\{(\w+):\w+\}", r"{\1}", path)] = item
        return out


def _endpoint(operations: dict[str, Operation]) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint of one path: it reads the body's JSON (for an operation
    that takes one) and runs the method's ``handler(app, request, body)`` in the
    thread pool (it may block on Redis), and answers what it returns as JSON: a
    value (200), or ``(status, value)``. Its :class:`HTTPError`, and the errors of
    fastq that are no bug (:func:`refusal`), become ``{"error": ...}`` replies."""

    async def call(request: Request) -> Response:
        op = operations[request.method if request.method != "HEAD" else "GET"]
        # the guard's rules again, here where no path can miss them (a route mounted
        # under another prefix, a path the guard read otherwise than the router)
        door: Door = request.app.state.door
        refused = door.refusal(request.method, header_map(request.scope), api=True)
        if refused is not None:
            return error_reply(*refused)
        try:
            raw = await request.body() if op.takes_body else b""  # read by the guard: no wait
            if inspect.iscoroutinefunction(op.handler):
                out = await _guarded_async(op.handler, fastq_app(request), request, raw)
            else:
                out = await run_in_threadpool(
                    _guarded, op.handler, fastq_app(request), request, raw
                )
        except HTTPError as exc:
            return error_reply(exc.status, exc.message, **exc.more)
        status, value = out if isinstance(out, tuple) else (200, out)
        return JSONReply(value, status_code=status)

    return call


def _guarded(handler: Handler, app: App, request: Request, raw: bytes) -> Any:
    """In the thread pool: the body's JSON read (up to the bound, some milliseconds
    that the event loop need not wait), then the handler."""
    body = parse_json(raw)
    try:
        return handler(app, request, body)
    except HTTPError:
        raise
    except Exception as exc:
        mapped = refusal(exc)
        if mapped is None:
            raise
        raise mapped from exc


async def _guarded_async(handler: Handler, app: App, request: Request, raw: bytes) -> Any:
    """On the event loop: the body's JSON read (a coroutine handler's body is a
    small one), then the handler, its errors mapped as :func:`_guarded` maps them."""
    body = parse_json(raw)
    try:
        return await handler(app, request, body)
    except HTTPError:
        raise
    except Exception as exc:
        mapped = refusal(exc)
        if mapped is None:
            raise
        raise mapped from exc


def refusal(exc: BaseException) -> Optional[HTTPError]:
    """The reply to an error of fastq's that is not a bug of the server: bad input
    (422), an unknown queue (404), a shard count in conflict or a batch that takes no
    job (409), Redis out of reach or refusing (503); None for any other (a bug: a
    500, logged). The one place an error becomes a status."""
    if isinstance(exc, UnknownQueue):
        return HTTPError(404, str(exc))
    if isinstance(exc, BatchClosed):  # a ValueError, but of the batch's state
        return HTTPError(409, str(exc), batch=exc.batch_id, state=exc.state or "unknown")
    if isinstance(exc, ShardCountMismatch):
        return HTTPError(409, str(exc))
    if isinstance(exc, EnqueueError):
        return HTTPError(503, str(exc), written=list(exc.written))
    if isinstance(exc, (RedisUnavailable, RedisRefused)):
        return HTTPError(503, str(exc))
    if isinstance(exc, redis.RedisError):  # a call made on the client itself
        # retried by the client: a claim lost on the way costs one lease of delay, a
        # done sent again is harmless
        return HTTPError(503, f"Redis could not serve the call: {type(exc).__name__}: {exc}")
    if isinstance(exc, (TypeError, ValueError)):
        return HTTPError(422, str(exc))
    return None


def require_object(body: Any, what: str) -> dict[str, Any]:
    """``body`` as a JSON object (an empty body: ``{}``).

    Raises:
        HTTPError: 400, it is another JSON value.
    """
    if body is NO_BODY:
        return {}
    if not isinstance(body, dict):
        raise HTTPError(400, f"{what}: the body must be a JSON object, not {json_type(body)}")
    return body


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
