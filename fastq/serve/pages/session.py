"""Who may see the dashboard's pages and act through them: the token of the API.

A person logs in by POSTing the token to ``/login``; the reply sets a session
cookie (HttpOnly, SameSite=Strict) holding a random nonce and an HMAC of it keyed
by the token: never the token itself, and any server that has the token checks it
with no state of its own. A program sends ``Authorization: Bearer <token>`` to the
pages as to the API. Every action is a POST whose form carries the session's CSRF
token (an HMAC of the nonce, another key), compared with ``hmac.compare_digest``.

Without a token (a server on loopback, as :mod:`fastq.serve.guard` decides for the
API) the pages take only requests addressed to a loopback name, with no login; the
session's keys are then a secret of the process, made at start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Optional
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from fastq.serve.guard import is_loopback_host

COOKIE = "fastq_session"
MAX_FORM_BYTES = 64 * 1024
BEARER_NONCE = "bearer"  # the session of a request that carries the token itself


class FormTooLarge(Exception):
    pass


class Sessions:
    """The dashboard's sessions and CSRF tokens for one server (see the module).

    Args:
        token: the API's token; None: none (loopback only).
    """

    def __init__(self, token: Optional[str]) -> None:
        self.token = token
        key = token.encode() if token is not None else secrets.token_bytes(32)
        self._session_key = hmac.new(key, b"fastq dashboard session", hashlib.sha256).digest()
        self._csrf_key = hmac.new(key, b"fastq dashboard csrf", hashlib.sha256).digest()
        self._token_digest = hashlib.sha256(key).digest()

    def _mac(self, nonce: str) -> str:
        return hmac.new(self._session_key, nonce.encode(), hashlib.sha256).hexdigest()

    def new_cookie(self) -> str:
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._mac(nonce)}"

    def check_token(self, given: str) -> bool:
        """Whether ``given`` is the token (compared as digests: the time taken says
        nothing of its length nor of how much of it matched)."""
        if self.token is None:
            return False
        digest = hashlib.sha256(given.strip().encode()).digest()
        return hmac.compare_digest(digest, self._token_digest)

    def session_of(self, request: Request) -> Optional[str]:
        """The session (its nonce) of a request that may see the pages, else None."""
        if self.token is None and not is_loopback_host(request.headers.get("host", "").encode()):
            return None
        given = request.headers.get("authorization")
        if given is not None and self.token is not None:
            scheme, _, value = given.partition(" ")
            if scheme.lower() == "bearer" and self.check_token(value):
                return BEARER_NONCE
            return None
        cookie = request.cookies.get(COOKIE, "")
        nonce, _, mac = cookie.partition(".")
        if nonce and mac and hmac.compare_digest(mac.encode(), self._mac(nonce).encode()):
            return nonce
        return None

    def csrf(self, session: str) -> str:
        return hmac.new(self._csrf_key, session.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, session: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.csrf(session).encode())

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=root_of(request) + "/",
        )

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path=root_of(request) + "/")


def loopback(request: Request) -> bool:
    """Whether the request is addressed to a loopback name (``Host``)."""
    return is_loopback_host(request.headers.get("host", "").encode())


def root_of(request: Request) -> str:
    """The path prefix every link and asset of the pages starts with: ``--root-path``
    (Starlette's ``root_path``), without a trailing ``/``; empty at ``/``."""
    return str(request.scope.get("root_path", "")).rstrip("/")


async def read_form(request: Request) -> dict[str, str]:
    """A POSTed ``application/x-www-form-urlencoded`` form: each field's first value.

    Raises:
        FormTooLarge: a body over :data:`MAX_FORM_BYTES`.
    """
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormTooLarge()
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}
