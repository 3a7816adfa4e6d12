"""How every page of the dashboard is served: :func:`page`, the one wrapper of a
page, a fragment or an action; :func:`render` (Jinja2, ``fastq/serve/templates``);
:func:`url_for`, every link's path; and what an action answers (:func:`back`,
:func:`confirm`).

:func:`page` checks the session (:mod:`fastq.serve.pages.session`), then for a
POST the read-only switch and the CSRF token, then runs the view in the thread
pool (fastq's calls block on Redis). An action calls the same :class:`fastq.App`
method as the CLI's command, then redirects (303) back to the page with what it
did; a view refuses with :class:`fastq.serve.reply.HTTPError`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional, Union
from urllib.parse import parse_qsl, quote, urlencode

from jinja2 import pass_context
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from fastq.app import App
from fastq.errors import FastqError
from fastq.serve.pages import filters
from fastq.serve.pages.session import (
    BEARER_NONCE,
    FormTooLarge,
    Sessions,
    loopback,
    read_form,
    root_of,
)
from fastq.serve.reply import HTTPError
from fastq.validate import check_job_id

log = logging.getLogger("fastq.serve")

# the dashboard's templates and its static files (fastq/serve/templates, static)
SERVE_DIR = Path(__file__).parent.parent
templates = Jinja2Templates(directory=str(SERVE_DIR / "templates"))
templates.env.filters["when"] = filters.when
templates.env.filters["ago"] = filters.ago
templates.env.filters["lasted"] = filters.lasted
templates.env.filters["mib"] = filters.mib

# a view: (app, request, form) -> a template's name and context, or a response
Rendered = Union[tuple[str, dict[str, Any]], Response]
View = Callable[[App, Request, dict[str, str]], Rendered]

# what the pages' replies carry: never kept, never framed by another site
HEADERS = {
    "Cache-Control": "no-store",
    # scripts only from the package's own files: a job's arguments or error shown on a
    # page can run nothing even if escaping failed
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def url_for(request: Request, name: str, **params: Any) -> str:
    """The path of the page route ``name``, under ``--root-path``: its path
    parameters quoted whole (a job id may hold ``/``, ``?`` or ``#``), the other
    ``params`` its query string (None: left out).

    A path, not Starlette's absolute ``request.url_for``: behind a proxy that ends
    TLS, an absolute URL would name the scheme and host the server sees, not the
    browser's.
    """
    route = _pages_by_name(request)[name]
    path_params = {key: params.pop(key) for key in route.param_convertors if key in params}
    quoted = {
        # a static file's path keeps its folders
        key: quote(str(value), safe="/" if name == "static" else "")
        for key, value in path_params.items()
    }
    url = root_of(request) + str(route.url_path_for(name, **quoted))
    query = {key: value for key, value in params.items() if value is not None}
    return f"{url}?{urlencode(query)}" if query else url


def _pages_by_name(request: Request) -> dict[str, Any]:
    """The pages' routes by name (:func:`fastq.serve.app.create_app` keeps them)."""
    named: dict[str, Any] = request.app.state.page_routes
    return named


@pass_context
def _template_url_for(context: Any, name: str, /, **params: Any) -> str:
    return url_for(context["request"], name, **params)


# the templates' url_for is ours (a path under --root-path), not Starlette's
templates.env.globals["url_for"] = _template_url_for


NO_TOKEN = (
    "this server has no token and answers only requests to localhost: "
    "start it with --token-file or $FASTQ_TOKEN"
)


def check_id(job_id: str) -> bool:
    try:
        check_job_id(job_id)
    except (TypeError, ValueError):
        return False
    return True


def page(view: View, *, public: bool = False) -> Callable[[Request], Any]:
    """The handler of a page, a fragment or an action (see the module)."""

    async def handler(request: Request) -> Response:  # named after its view: url_for
        sessions: Sessions = request.app.state.sessions
        root = root_of(request)
        session = sessions.session_of(request)
        new_cookie: Optional[str] = None
        if session is None and sessions.token is None and not public:
            if not loopback(request):
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
                url_for(request, "login", next=there), status_code=303, headers=HEADERS
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
        except HTTPError as exc:
            # an action refused: back to the page it came from, saying why; a page of
            # nothing (404, also of an action on no such queue): a page saying so
            if request.method != "POST" or exc.status == 404:
                return _refusal(request, exc.status, exc.message)
            back = (
                form.get("back") or request.headers.get("referer") or url_for(request, "overview")
            )
            return _back(request, back, err=exc.message)
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

    handler.__name__ = view.__name__  # its route's name (url_for)
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
        "here": request.url.path + ("?" + request.url.query if request.url.query else ""),
        "error": request.query_params.get("err"),
        **context,
    }
    return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)


def _refusal(request: Request, status: int, message: str) -> Response:
    if "text/html" not in request.headers.get("accept", "") or "hx-request" in request.headers:
        return Response(
            message + "\n", status_code=status, media_type="text/plain", headers=HEADERS
        )
    return render(request, "refused.html", {"status": status, "reason": message}, status)


def local_path(where: str, root: str) -> Optional[str]:
    """``where`` if it is a path of this dashboard (under ``root``), else None: a
    redirect never leaves the site (``//host`` and ``/\\host`` are other sites to
    a browser)."""
    if not where.startswith(root + "/") or where[len(root) + 1 : len(root) + 2] in ("/", "\\"):
        return None
    if any(c in where for c in "\r\n\\"):
        return None
    return where


def _back(request: Request, where: str, **said: str) -> Response:
    """303 to ``where`` (a path of this dashboard) saying ``msg`` or ``err``."""
    root = root_of(request)
    where = local_path(where, root) or url_for(request, "overview")
    path, _, query = where.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in ("msg", "err")]
    return RedirectResponse(
        f"{path}?{urlencode(kept + list(said.items()))}", status_code=303, headers=HEADERS
    )


def back(request: Request, form: dict[str, str], message: str) -> Response:
    return _back(request, form.get("back") or url_for(request, "overview"), msg=message)


def confirm(request: Request, form: dict[str, str], question: str, yes: str) -> Response:
    """The confirm step of a destructive action: the same form again, confirmed."""
    fields = {k: v for k, v in form.items() if k not in ("csrf", "confirmed")}
    return render(
        request,
        "confirm.html",
        {
            "question": question,
            "yes": yes,
            "action": request.url.path,
            "fields": fields,
            "back": form.get("back") or url_for(request, "overview"),
        },
    )
