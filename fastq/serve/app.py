"""The ASGI app of ``fastq serve``: :func:`create_app`, which assembles its two
halves. The JSON API (:mod:`fastq.serve.api`: producers, batches, HTTP workers and
the OpenAPI document of them all), mounted at ``/api/v1`` behind the guard
(:mod:`fastq.serve.guard`: the token, the body's bound and type on every ``/api/``
route); the dashboard's pages (:mod:`fastq.serve.pages`) at ``/``. It holds no
state but the :class:`fastq.App`: any number of servers on one Redis answer alike.
"""

from __future__ import annotations

import logging
from typing import Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from fastq.app import App
from fastq.serve.api import batches, openapi, producers, workers
from fastq.serve.api.known import KnownQueues
from fastq.serve.guard import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES, Door, Guard
from fastq.serve.pages.session import DEFAULT_MAX_AGE_S, Sessions
from fastq.serve.reply import error_reply

log = logging.getLogger("fastq.serve")

# where the API is mounted (the guard guards all of /api/)
API_ROOT = "/api/v1"
NAMED = (Route, Mount)
# the API's route tables, in the order their routes match
API = (producers.ROUTES, batches.ROUTES, workers.ROUTES, openapi.ROUTES)


def create_app(
    fastq_app: App,
    token: Optional[str],
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    read_only: bool = False,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    session_max_age_s: int = DEFAULT_MAX_AGE_S,
) -> Starlette:
    """The HTTP API over ``fastq_app``.

    Args:
        fastq_app: the app whose Redis, namespace and registered jobs it serves;
            handlers reach it as ``request.app.state.fastq``.
        token: the bearer token every ``/api/`` request must carry; None: none
            (for a server on loopback only, see :mod:`fastq.serve.guard`).
        max_body_bytes: the largest request body taken (413 beyond).
        read_only: the dashboard's pages (:mod:`fastq.serve.pages`) show no action
            and refuse every one (403).
        body_timeout_s: the time a request's body may take to come (408 beyond).
        session_max_age_s: how long a dashboard session lasts from its login.

    Raises:
        ValueError: an empty token, ``max_body_bytes`` below 1, a timeout or an age
            that is not a positive number.
    """
    if token is not None and not token:
        raise ValueError("the token is empty")
    if (
        isinstance(max_body_bytes, bool)
        or not isinstance(max_body_bytes, int)
        or max_body_bytes < 1
    ):
        raise ValueError(f"max_body_bytes must be an int >= 1, not {max_body_bytes!r}")
    if isinstance(body_timeout_s, bool) or not (
        isinstance(body_timeout_s, (int, float)) and 0 < body_timeout_s < float("inf")
    ):
        raise ValueError(f"body_timeout_s must be a number > 0, not {body_timeout_s!r}")
    door = Door(token)
    api = [route for table in API for route in table.starlette_routes()]
    document = openapi.document(API, API_ROOT, max_body_bytes)
    pages = _dashboard()
    # the API under its prefix, named: its routes' names never shadow the pages'
    routes: list[BaseRoute] = [Mount(API_ROOT, routes=api, name="api"), *pages]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                Guard, door=door, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s
            )
        ],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    app.state.fastq = fastq_app
    app.state.openapi = document
    app.state.door = door  # the API's endpoint checks it again (fastq.serve.api.endpoint)
    app.state.sessions = Sessions(token, session_max_age_s)  # the pages' logins, CSRF
    app.state.read_only = read_only
    app.state.known_queues = KnownQueues(fastq_app)  # the API's 404 of a queue unknown
    # the pages' routes by name, for their links (fastq.serve.pages.url_for)
    app.state.page_routes = {route.name: route for route in pages if isinstance(route, NAMED)}
    return app


def _dashboard() -> list[BaseRoute]:
    """The dashboard's routes (:mod:`fastq.serve.pages.routes`), or none without
    jinja2."""
    try:
        from fastq.serve.pages.routes import ROUTES
    except ModuleNotFoundError as exc:
        if exc.name != "jinja2":
            raise
        log.warning("fastq serve: no dashboard at / (it needs jinja2: pip install 'fastq[web]')")
        return []
    return list(ROUTES)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route: 404, another method: 405) as JSON."""
    assert isinstance(exc, HTTPException)
    reply = error_reply(exc.status_code, str(exc.detail))
    if exc.headers:
        reply.headers.update(exc.headers)
    return reply


async def _server_error(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback, answered as a JSON 500 that shows nothing
    of the request (a header, the token) nor of the server."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_reply(500, "internal error: see the server's log")
