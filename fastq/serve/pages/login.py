"""Logging in to the dashboard and out (:mod:`fastq.serve.pages.session` holds
what a session is)."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fastq.app import App
from fastq.protocol import dashboard
from fastq.serve.pages.handler import HEADERS, Rendered, local_path, render, url_for
from fastq.serve.pages.session import LOGIN_COOKIE, Sessions, root_of


def login(app: App, request: Request, form: dict[str, str]) -> Rendered:
    """The login form (its CSRF token made of a nonce in a cookie of its own), and
    its POST: the token, checked after the form's CSRF token and the throttle of
    wrong tokens; a new session on success."""
    sessions: Sessions = request.app.state.sessions
    root = root_of(request)
    there = local_path(form.get("next") or request.query_params.get("next") or "/", "") or "/"
    nonce = sessions.login_nonce(request)
    if request.method == "GET":
        if sessions.token is None:
            return "login.html", {"next": there, "no_token": True}
        return _form(request, there, nonce or secrets.token_urlsafe(16), 200)
    if nonce is None or not sessions.check_sign(
        "login:" + nonce, "csrf", form.get("login_csrf", "")
    ):
        return _form(request, there, secrets.token_urlsafe(16), 403, stale=True)
    client = request.client.host if request.client else ""
    wait_s = sessions.throttle.wait_s(client)
    if wait_s > 0:
        response = _form(request, there, nonce, 429, throttled=True)
        response.headers["Retry-After"] = str(int(wait_s) + 1)
        return response
    if not sessions.check_token(form.get("token", "")):
        sessions.throttle.failed(client)
        return _form(request, there, nonce, 401, wrong=True)
    with app.store.producer_call():
        epoch, _ = dashboard.session_state(app.store.redis, app.store.namespace_keys, "")
    response = RedirectResponse(root + there, status_code=303, headers=HEADERS)
    sessions.set_cookie(request, response, sessions.new_cookie(epoch))
    response.delete_cookie(LOGIN_COOKIE, path=root + "/")
    return response


def _form(request: Request, there: str, nonce: str, status: int, **said: bool) -> Response:
    """The login form, with its CSRF token and the cookie of its nonce."""
    sessions: Sessions = request.app.state.sessions
    context = {"next": there, "login_csrf": sessions.sign("login:" + nonce, "csrf"), **said}
    response = render(request, "login.html", context, status)
    sessions.set_login_cookie(request, response, nonce)
    return response


def logout(app: App, request: Request, form: dict[str, str]) -> Rendered:
    """The end of the session (its CSRF token checked by the page's wrapper): kept
    in Redis as revoked until it would have expired, so its cookie opens nothing
    on any server even if it was copied."""
    sessions: Sessions = request.app.state.sessions
    session = getattr(request.state, "session", None)
    time_left_s = sessions.time_left_s(request)
    if session is not None and time_left_s > 0:
        with app.store.producer_call():
            dashboard.revoke_session(
                app.store.redis, app.store.namespace_keys, session, time_left_s
            )
    response = RedirectResponse(url_for(request, "login"), status_code=303, headers=HEADERS)
    sessions.clear_cookie(request, response)
    return response
