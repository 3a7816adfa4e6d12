"""The dashboard's pages at ``/`` of ``fastq serve``: what each shows and does.

Server-rendered (Jinja2, :mod:`fastq.serve.templates`), live through htmx, which
polls each page's fragment every few seconds; the charts are uPlot's, fed by
``/_/history``. Every page and fragment goes through :func:`page`: the session
(:mod:`fastq.serve.session`), then for a POST the read-only switch and the CSRF
token, then the view, run in the thread pool (fastq's calls block on Redis). An
action calls the same :class:`fastq.App` method as the CLI's command, then
redirects (303) back to the page with what it did.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional, Union
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from fastq.app import App
from fastq.errors import FastqError
from fastq.serve import views
from fastq.serve.session import BEARER_NONCE, FormTooLarge, Sessions, read_form, root_of

log = logging.getLogger("fastq.serve")

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["when"] = views.when
templates.env.filters["ago"] = views.ago
templates.env.filters["q"] = lambda text: quote(str(text), safe="")

# a view: (app, request, form) -> a template's name and context, or a response
Rendered = Union[tuple[str, dict[str, Any]], Response]
View = Callable[[App, Request, dict[str, str]], Rendered]

# what the pages' replies carry: never kept, never framed by another site
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


NO_TOKEN = (
    "this server has no token and answers only requests to localhost: "
    "start it with --token-file or $FASTQ_TOKEN"
)


class Refused(Exception):
    """An action refused with its message (shown on the page it returns to)."""


def page(view: View, *, public: bool = False) -> Callable[[Request], Any]:
    """The handler of a page, a fragment or an action (see the module)."""

    async def handler(request: Request) -> Response:
        sessions: Sessions = request.app.state.sessions
        root = root_of(request)
        session = sessions.session_of(request)
        new_cookie: Optional[str] = None
        if session is None and sessions.token is None and not public:
            if not views.loopback(request):
                return _refusal(request, 403, NO_TOKEN)
            if request.method == "POST":
                return _refusal(request, 403, "no session: reload the page, then try again")
            new_cookie = sessions.new_cookie()  # loopback without a token: no login
            session = new_cookie.split(".", 1)[0]
        if session is None and not public:
            if (
                request.method == "POST"
                or "authorization" in request.headers
                or "hx-request" in request.headers
            ):
                return _refusal(request, 401, "log in first: no session, or a wrong token")
            there = request.url.path[len(root) :] if request.url.path.startswith(root) else "/"
            if request.url.query:
                there += "?" + request.url.query
            return RedirectResponse(
                f"{root}/login?{urlencode({'next': there})}", status_code=303, headers=HEADERS
            )
        form: dict[str, str] = {}
        if request.method == "POST":
            try:
                form = await read_form(request)
            except FormTooLarge:
                return _refusal(request, 413, "the form is too large")
            if not public:
                assert session is not None
                if request.app.state.read_only:
                    return _refusal(request, 403, "this dashboard is read-only (--read-only)")
                if not sessions.check_csrf(session, form.get("csrf", "")):
                    return _refusal(request, 403, "missing or wrong CSRF token: reload the page")
        request.state.session = session
        try:
            rendered = await run_in_threadpool(view, request.app.state.fastq, request, form)
        except Refused as exc:
            back = form.get("back") or request.headers.get("referer") or f"{root}/"
            return _back(request, back, error=str(exc))
        except FastqError as exc:
            return _refusal(request, 503, f"Redis: {exc}")
        if isinstance(rendered, Response):
            response = rendered
        else:
            name, context = rendered
            response = render(request, name, context)
        if new_cookie is not None:
            sessions.set_cookie(request, response, new_cookie)
        response.headers.update(HEADERS)
        return response

    return handler


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    sessions: Sessions = request.app.state.sessions
    session = getattr(request.state, "session", None)
    read_only = request.app.state.read_only
    context = {
        "root": root_of(request),
        "csrf": sessions.csrf(session) if session is not None else "",
        "read_only": read_only,
        "logged_in": session is not None and session != BEARER_NONCE and sessions.token is not None,
        "message": request.query_params.get("msg"),
        "error": request.query_params.get("err"),
        **context,
    }
    return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)


def _refusal(request: Request, status: int, message: str) -> Response:
    if "text/html" not in request.headers.get("accept", "") or "hx-request" in request.headers:
        return Response(message + "\n", status_code=status, media_type="text/plain",
                        headers=HEADERS)  # fmt: skip
    return render(request, "refused.html", {"status": status, "reason": message}, status)


def _back(request: Request, where: str, **said: str) -> Response:
    """303 to ``where`` (a path of this dashboard) saying ``msg`` or ``err``."""
    root = root_of(request)
    if not where.startswith(root + "/") or where.startswith("//"):
        where = root + "/"
    where = where.split("?msg=", 1)[0].split("?err=", 1)[0].split("&msg=", 1)[0]
    where = where.split("&err=", 1)[0]
    sep = "&" if "?" in where else "?"
    return RedirectResponse(f"{where}{sep}{urlencode(said)}", status_code=303, headers=HEADERS)


def back(request: Request, form: dict[str, str], message: str) -> Response:
    return _back(request, form.get("back") or f"{root_of(request)}/", msg=message)


# -- login ------------------------------------------------------------------------


def login(app: App, request: Request, form: dict[str, str]) -> Rendered:
    sessions: Sessions = request.app.state.sessions
    root = root_of(request)
    there = form.get("next") or request.query_params.get("next") or "/"
    if not there.startswith("/") or there.startswith("//"):
        there = "/"
    if request.method == "GET":
        return "login.html", {"next": there, "no_token": sessions.token is None}
    if not sessions.check_token(form.get("token", "")):
        return render(request, "login.html", {"next": there, "wrong": True}, 401)
    response = RedirectResponse(root + there, status_code=303)
    sessions.set_cookie(request, response, sessions.new_cookie())
    return response


def logout(app: App, request: Request, form: dict[str, str]) -> Rendered:
    response = RedirectResponse(f"{root_of(request)}/login", status_code=303)
    request.app.state.sessions.clear_cookie(request, response)
    return response


# -- the overview ---------------------------------------------------------------------


def overview(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "overview.html", {"queues": views.queue_rows(app), "page": "overview"}


def overview_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "_queues.html", {"queues": views.queue_rows(app)}


def history(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = request.query_params.get("queue") or None
    try:
        window_s = int(request.query_params.get("window_s", "3600"))
    except ValueError:
        window_s = 3600
    try:
        return JSONResponse(views.history_series(app, queue, window_s))
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=422)


def routes() -> list[BaseRoute]:
    """The dashboard's routes (:func:`fastq.serve.app.create_app` adds them)."""
    return [
        Route("/", page(overview), methods=["GET"]),
        Route("/login", page(login, public=True), methods=["GET", "POST"]),
        Route("/logout", page(logout, public=True), methods=["POST"]),
        Route("/_/queues", page(overview_fragment), methods=["GET"]),
        Route("/_/history", page(history), methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
