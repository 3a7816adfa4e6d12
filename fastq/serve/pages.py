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
from urllib.parse import parse_qsl, quote, urlencode

from jinja2 import pass_context
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.errors import FastqError
from fastq.serve import views
from fastq.serve.reply import HTTPError, JSONReply, error_reply
from fastq.serve.session import BEARER_NONCE, FormTooLarge, Sessions, read_form, root_of
from fastq.validate import check_job_id

log = logging.getLogger("fastq.serve")

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["when"] = views.when
templates.env.filters["ago"] = views.ago
templates.env.filters["lasted"] = views.lasted
templates.env.filters["mib"] = views.mib

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


# -- login ------------------------------------------------------------------------


def login(app: App, request: Request, form: dict[str, str]) -> Rendered:
    sessions: Sessions = request.app.state.sessions
    root = root_of(request)
    there = local_path(form.get("next") or request.query_params.get("next") or "/", "") or "/"
    if request.method == "GET":
        return "login.html", {"next": there, "no_token": sessions.token is None}
    if not sessions.check_token(form.get("token", "")):
        return render(request, "login.html", {"next": there, "wrong": True}, 401)
    response = RedirectResponse(root + there, status_code=303)
    sessions.set_cookie(request, response, sessions.new_cookie())
    return response


def logout(app: App, request: Request, form: dict[str, str]) -> Rendered:
    response = RedirectResponse(url_for(request, "login"), status_code=303)
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
        return JSONReply(views.history_series(app, queue, window_s))
    except ValueError as exc:
        return error_reply(422, str(exc))


# -- a queue --------------------------------------------------------------------------


def _queue(app: App, request: Request) -> str:
    queue = str(request.path_params["queue"])
    if not valid_name(queue) or queue not in app.queues():
        raise HTTPError(404, f"no queue {queue!r} in namespace {app.namespace}")
    return queue


def _page_number(request: Request) -> int:
    text = request.query_params.get("page", "0")
    return min(int(text), 10_000) if text.isdigit() else 0


def queue_page(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    params = request.query_params
    job_id = params.get("id", "").strip()
    if job_id:  # the search by id: straight to the job's page, if the queue has it
        if check_id(job_id) and app.get_job(job_id, queue) is not None:
            return RedirectResponse(url_for(request, "job_page", job_id=job_id, queue=queue), 303)
        return render(
            request,
            "queue.html",
            {**_queue_context(app, queue, "queued", 0), "error": f"no job {job_id!r} in {queue}"},
        )
    tag = params.get("tag", "").strip()
    if tag:
        return "queue.html", {**_queue_context(app, queue, None, 0), **_tagged(app, queue, params)}
    state = params.get("state", "queued")
    if state not in [s for s, _, _ in views.STATES]:
        state = "queued"
    return "queue.html", _queue_context(app, queue, state, _page_number(request))


def _queue_context(app: App, queue: str, state: Optional[str], number: int) -> dict[str, Any]:
    stats = app.stats(queue)
    jobs, more = views.queue_jobs(app, queue, state, number) if state else ([], False)
    return {
        "page": "queue",
        "queue": queue,
        "stats": stats,
        "rate": views.rate_text(stats),
        "states": views.STATES,
        "state": state,
        "jobs": jobs,
        "number": number,
        "more": more,
        "workers": sum(
            1
            for e in app.workers(queue)
            for c in e.get("children", ())
            if c.get("kind") == "worker"
        ),
    }


def _tagged(app: App, queue: str, params: Any) -> dict[str, Any]:
    tag = params.get("tag", "").strip()
    try:
        found = app.jobs_by_tag(tag, queue, params.get("cursor") or None, views.PAGE_SIZE)
    except ValueError as exc:
        return {"tag": tag, "tagged": [], "cursor": None, "error": str(exc)}
    return {"tag": tag, "tagged": found.jobs, "cursor": found.cursor}


def queue_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    stats = app.stats(queue)
    return "_queue_counts.html", {"queue": queue, "stats": stats, "rate": views.rate_text(stats)}


def pause(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    app.pause(queue)
    return back(request, form, f"paused {queue}: workers claim none of its jobs until resumed")


def resume(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    app.resume(queue)
    return back(request, form, f"resumed {queue}")


def rate_limit(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    rate_text, per_text, burst_text = (form.get(f, "").strip() for f in ("rate", "per_s", "burst"))
    try:
        rate = int(rate_text) if rate_text else None
        per_s = float(per_text) if per_text else 1.0
        burst = int(burst_text) if burst_text else None
        app.set_rate_limit(queue, rate, per_s=per_s, burst=burst)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"rate limit not set: {exc}") from None
    limit = app.rate_limit(queue)
    return back(request, form, f"rate limit of {queue}: {limit if limit else 'none'}")


PURGEABLE = ("ready", "scheduled", "dead", "broken")


def purge(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    chosen = {what: form.get(what) == "1" for what in PURGEABLE}
    if not any(chosen.values()):
        raise HTTPError(422, "purge: choose what to delete (ready, scheduled, dead, broken)")
    named = ", ".join(what for what, on in chosen.items() if on)
    if form.get("confirmed") != "1":
        return confirm(
            request,
            form,
            f"Delete every {named} job of queue {queue}, for good?",
            f"Yes, purge {queue}",
        )
    n = app.purge(queue, **chosen)
    return back(request, form, f"purged {n} jobs ({named}) from {queue}")


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


# -- a job ----------------------------------------------------------------------------


def job_page(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id = str(request.path_params["job_id"])
    queue = request.query_params.get("queue") or None
    if not check_id(job_id) or (queue is not None and not valid_name(queue)):
        raise HTTPError(404, f"no job {job_id!r}")
    info = app.get_job(job_id, queue)
    if info is None:
        raise HTTPError(
            404, f"no job {job_id!r}: an unknown id, or a job that ended and whose record is gone"
        )
    kept, result = views.result_of(app, info)
    running = views.running_since(app, info.queue).get(job_id) if info.state == "active" else None
    return "job.html", {
        "page": "job",
        "job": info,
        "kept": kept,
        "result": result,
        "running": running,
        # in the dead set or the broken hash still (not a record's word alone)
        "retryable": info.state in ("dead", "broken") and bool(info.raw),
        "cancellable": info.state in ("queued", "scheduled", "active"),
    }


def _job_form(app: App, form: dict[str, str]) -> tuple[str, Optional[str]]:
    job_id, queue = form.get("id", ""), form.get("queue") or None
    if not check_id(job_id) or (queue is not None and not valid_name(queue)):
        raise HTTPError(422, f"no job {job_id!r}")
    return job_id, queue


def retry_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if not app.retry_job(job_id, queue):
        raise HTTPError(409, f"job {job_id} is neither dead nor broken: nothing retried")
    return back(request, form, f"job {job_id} is queued again")


def cancel_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if form.get("confirmed") != "1":
        return confirm(request, form, f"Cancel job {job_id}?", "Yes, cancel it")
    done = app.cancel(job_id, queue)
    if not done:
        raise HTTPError(409, f"job {job_id} has ended: only a job yet to end can be cancelled")
    return back(request, form, f"job {job_id} cancelled")


def delete_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if form.get("confirmed") != "1":
        return confirm(request, form, f"Delete job {job_id} for good?", "Yes, delete it")
    if not app.delete_job(job_id, queue):
        raise HTTPError(409, f"job {job_id} is neither dead nor broken: nothing deleted")
    return back(request, form, f"job {job_id} deleted")


# -- workers and periodic jobs ----------------------------------------------------------


def workers(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "workers.html", {"page": "workers", "entries": app.workers()}


def workers_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "_workers.html", {"entries": app.workers()}


def periodic(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "periodic.html", {"page": "periodic", "rows": views.periodic_rows(app)}


def routes() -> list[BaseRoute]:
    """The dashboard's routes (:func:`fastq.serve.app.create_app` adds them)."""
    return [
        Route("/", page(overview), methods=["GET"]),
        Route("/login", page(login, public=True), methods=["GET", "POST"]),
        Route("/logout", page(logout, public=True), methods=["POST"]),
        Route("/_/queues", page(overview_fragment), methods=["GET"]),
        Route("/_/history", page(history), methods=["GET"]),
        Route("/queues/{queue}", page(queue_page), methods=["GET"]),
        Route("/_/queues/{queue}", page(queue_fragment), methods=["GET"]),
        Route("/queues/{queue}/pause", page(pause), methods=["POST"]),
        Route("/queues/{queue}/resume", page(resume), methods=["POST"]),
        Route("/queues/{queue}/rate_limit", page(rate_limit), methods=["POST"]),
        Route("/queues/{queue}/purge", page(purge), methods=["POST"]),
        Route("/jobs/{job_id:path}", page(job_page), methods=["GET"]),
        Route("/actions/retry", page(retry_job), methods=["POST"]),
        Route("/actions/cancel", page(cancel_job), methods=["POST"]),
        Route("/actions/delete", page(delete_job), methods=["POST"]),
        Route("/workers", page(workers), methods=["GET"]),
        Route("/_/workers", page(workers_fragment), methods=["GET"]),
        Route("/periodic", page(periodic), methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
