"""Logging in to the dashboard and out (:mod:`fastq.serve.pages.session` holds
what a session is)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse

from fastq.app import App
from fastq.serve.pages.handler import Rendered, local_path, render, url_for
from fastq.serve.pages.session import Sessions, root_of


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
