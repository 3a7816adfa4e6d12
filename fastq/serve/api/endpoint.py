"""How every route of the API is written: :func:`endpoint` reads the request's
JSON (:func:`parse_json`), runs the handler off the event loop, and answers what
it returns as JSON (:class:`fastq.serve.reply.JSONReply`) or what it raised as the
one refusal (:class:`fastq.serve.reply.HTTPError`; :func:`refusal` maps fastq's
errors onto it).

fastq's calls block on Redis (redis-py, synchronous), so a handler never makes
one on the event loop: :func:`endpoint` reads the request there (the guard has
already buffered its body) and runs the handler in Starlette's thread pool
(``run_in_threadpool``), where it calls the :class:`fastq.App` freely.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable, Optional

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from fastq.app import App
from fastq.errors import (
    BatchClosed,
    EnqueueError,
    RedisRefused,
    RedisUnavailable,
    ShardCountMismatch,
    UnknownQueue,
)
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


def endpoint(
    handler: Callable[[App, Request, Any], Any],
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint that reads the body's JSON and runs ``handler(app, request,
    body)`` in the thread pool (it may block on Redis) and answers what it returns as JSON: a value
    (200), or ``(status, value)``. Its :class:`HTTPError`, and the errors of
    fastq that are no bug (:func:`refusal`), become ``{"error": ...}`` replies."""

    async def call(request: Request) -> Response:
        try:
            raw = await request.body()  # read by the guard already: no wait
            out = await run_in_threadpool(_guarded, handler, fastq_app(request), request, raw)
        except HTTPError as exc:
            return error_reply(exc.status, exc.message, **exc.more)
        status, value = out if isinstance(out, tuple) else (200, out)
        return JSONReply(value, status_code=status)

    call.__name__ = handler.__name__
    call.__doc__ = handler.__doc__
    return call


def _guarded(
    handler: Callable[[App, Request, Any], Any], app: App, request: Request, raw: bytes
) -> Any:
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
