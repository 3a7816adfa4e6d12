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
from fastq.protocol import dashboard
from fastq.serve.pages import filters
from fastq.serve.pages.session import BEARER_NONCE, Sessions, read_form, root_of
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
templates.env.filters["preview"] = filters.preview

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


def is_job_id(job_id: str) -> bool:
    """Whether ``job_id`` may be a job's (or a batch's) id: a page of any other is
    a page of nothing."""
    try:
        check_job_id(job_id)
    except (TypeError, ValueError):
        return False
    return True


class _Refused(Exception):
    """A request refused before its view runs: the reply made already."""

    def __init__(self, response: Response) -> None:
        super().__init__()
        self.response = response


def page(view: View, *, public: bool = False) -> Callable[[Request], Any]:
    """The handler of a page, a fragment or an action (see the module): who may see
    it (:func:`_admit`, the one check of every page), what a POST may change
    (:func:`_read_action`: the read-only switch and the CSRF token), then the view,
    in the thread pool, and its reply (:func:`_answer`)."""

    async def handler(request: Request) -> Response:  # named after its view: url_for
        try:
            session, new_cookie = await _admit(request, public)
            form = await _read_action(request, session, public)
        except _Refused as refused:
            return refused.response
        request.state.session = session
        response = await _answer(request, view, form)
        if new_cookie is not None:
            request.app.state.sessions.set_cookie(request, response, new_cookie)
        response.headers.update(HEADERS)
        return response

    handler.__name__ = view.__name__  # its route's name (url_for)
    return handler


async def _admit(request: Request, public: bool) -> tuple[Optional[str], Optional[str]]:
    """The request's session, and the cookie of a new one to set (a server without
    a token, on loopback: no login); None for a public page seen without one.

    Raises:
        _Refused: no session (to the login form, or a 401), or Redis out of reach
            (503: a session's epoch and logout are kept there).
    """
    sessions: Sessions = request.app.state.sessions
    if sessions.bearer(request) is None:
        cookie = sessions.cookie_of(request)
        try:
            epoch, revoked = await run_in_threadpool(
                _session_state, request.app.state.fastq, cookie.nonce if cookie else ""
            )
        except FastqError as exc:
            raise _Refused(_refusal(request, 503, f"Redis: {exc}")) from None
        session = sessions.session_of(request, epoch, revoked)
    else:
        epoch, session = 0, sessions.session_of(request, 0)
    if session is not None or public:
        return session, None
    if sessions.token is None:  # the guard took only a request to localhost
        if request.method == "POST":
            raise _Refused(_refusal(request, 403, "no session: reload the page, then try again"))
        new_cookie = sessions.new_cookie(epoch)
        return new_cookie.split(".", 1)[0], new_cookie
    if (
        request.method == "POST"
        or "authorization" in request.headers
        or "hx-request" in request.headers
    ):
        raise _Refused(_refusal(request, 401, "log in first: no session, or a wrong token"))
    root = root_of(request)
    there = request.url.path[len(root) :] if request.url.path.startswith(root) else "/"
    if request.url.query:
        there += "?" + request.url.query
    login = RedirectResponse(
        url_for(request, "login", next=there), status_code=303, headers=HEADERS
    )
    raise _Refused(login)


def _session_state(app: App, nonce: str) -> tuple[int, bool]:
    """The namespace's session epoch, and whether session ``nonce`` logged out."""
    with app.store.producer_call():
        return dashboard.session_state(app.store.redis, app.store.namespace_keys, nonce)


async def _read_action(request: Request, session: Optional[str], public: bool) -> dict[str, str]:
    """A POST's form, checked again where a request changes state: not on a
    read-only dashboard, and carrying the session's CSRF token ({} for a GET). The
    login form, seen with no session, carries its own (:mod:`.login`).

    Raises:
        _Refused: read-only or a wrong token (403).
    """
    if request.method != "POST":
        return {}
    form = await read_form(request)
    if session is not None:
        sessions: Sessions = request.app.state.sessions
        if request.app.state.read_only and not public:
            raise _Refused(_refusal(request, 403, "this dashboard is read-only (--read-only)"))
        if not sessions.check_csrf(session, form.get("csrf", "")):
            raise _Refused(_refusal(request, 403, "missing or wrong CSRF token: reload the page"))
    return form


async def _answer(request: Request, view: View, form: dict[str, str]) -> Response:
    """The view's reply, run in the thread pool (fastq's calls block on Redis); what
    it refused, as the dashboard shows a refusal."""
    try:
        rendered = await run_in_threadpool(view, request.app.state.fastq, request, form)
    except HTTPError as exc:
        # an action refused: back to the page it came from, saying why; a page of
        # nothing (404, also of an action on no such queue): a page saying so
        if request.method != "POST" or exc.status == 404:
            return _refusal(request, exc.status, exc.message)
        back = form.get("back") or request.headers.get("referer") or url_for(request, "overview")
        return _back(request, back, err=exc.message)
    except FastqError as exc:
        return _refusal(request, 503, f"Redis: {exc}")
    if isinstance(rendered, Response):
        return rendered
    name, context = rendered
    return render(request, name, context)


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    sessions: Sessions = request.app.state.sessions
    session = getattr(request.state, "session", None)
    read_only = request.app.state.read_only
    context = {
        "root": root_of(request),
        "csrf": sessions.csrf(session) if session is not None else "",
        "read_only": read_only,
        "logged_in": session is not None and session != BEARER_NONCE and sessions.token is not None,
        "message": _said(request, session, "msg"),
        "here": request.url.path + ("?" + request.url.query if request.url.query else ""),
        "error": _said(request, session, "err"),
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
    """303 to ``where`` (a path of this dashboard) saying ``msg`` or ``err``, signed
    for the session (:func:`_said`: no link can put words on the page)."""
    root = root_of(request)
    where = local_path(where, root) or url_for(request, "overview")
    path, _, query = where.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in _SAID]
    session = getattr(request.state, "session", None)
    if session is not None:
        sessions: Sessions = request.app.state.sessions
        for kind, text in said.items():
            kept += [(kind, text), (kind + "_sig", sessions.sign(session, f"{kind}:{text}"))]
    return RedirectResponse(f"{path}?{urlencode(kept)}", status_code=303, headers=HEADERS)


# the query parameters of what an action said (_back), and their signatures
_SAID = ("msg", "err", "msg_sig", "err_sig")


def _said(request: Request, session: Optional[str], kind: str) -> Optional[str]:
    """What an action said on the page (``msg`` or ``err``), if this dashboard
    signed it for this session; None otherwise."""
    text = request.query_params.get(kind)
    if text is None or session is None:
        return None
    sessions: Sessions = request.app.state.sessions
    given = request.query_params.get(kind + "_sig", "")
    return text if sessions.check_sign(session, f"{kind}:{text}", given) else None


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
