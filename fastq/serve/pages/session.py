"""Who may see the dashboard's pages and act through them: the token of the API.

A person logs in by POSTing the token to ``/login`` (a form that carries a CSRF
token of its own, and a throttle on wrong tokens); the reply sets a session cookie
(HttpOnly, SameSite=Strict, ``Secure`` over HTTPS, a proxy's included when
``--forwarded-allow-ips`` trusts it) holding a random nonce, the time it was issued
and an HMAC of both and of the namespace's session epoch, keyed by the token: never
the token itself, and any server that has the token checks it. A session ends after
its maximum age, at logout (the nonce is kept in Redis as revoked until it would
have expired), and for every server at once when ``fastq serve --revoke-sessions``
adds one to the epoch (:mod:`fastq.protocol.dashboard`). A program sends
``Authorization: Bearer <token>`` to the pages as to the API; another scheme (a
proxy's ``Basic``) is none of the dashboard's and leaves the cookie to decide.

Every action is a POST whose form carries the session's CSRF token (an HMAC of the
nonce, another key), compared with ``hmac.compare_digest``; what an action says back
on the page it redirects to is signed the same way (:meth:`Sessions.sign`), so that
a link cannot put words on the page.

Without a token (a server on loopback, as :mod:`fastq.serve.guard` decides) the
pages need no login; the session's keys are then a secret of the process, made at
start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "fastq_session"
# the login form's own cookie: the nonce its CSRF token is made of
LOGIN_COOKIE = "fastq_login"
BEARER_NONCE = "bearer"  # the session of a request that carries the token itself
DEFAULT_MAX_AGE_S = 12 * 3600
# a nonce as new_cookie makes it (token_urlsafe(16)): anything else is no session's
_NONCE = re.compile(r"[A-Za-z0-9_-]{22}")
# a clock a little behind another server's still takes its fresh cookies
_CLOCK_SLACK_S = 60


@dataclass(frozen=True)
class Cookie:
    """A session cookie's parts, read but not yet checked (:meth:`Sessions.session_of`)."""

    nonce: str
    issued: int
    mac: str


class Sessions:
    """The dashboard's sessions and CSRF tokens for one server (see the module).

    Args:
        token: the API's token; None: none (loopback only).
        max_age_s: how long a session lasts from its login.
    """

    def __init__(self, token: Optional[str], max_age_s: int = DEFAULT_MAX_AGE_S) -> None:
        if isinstance(max_age_s, bool) or not isinstance(max_age_s, int) or max_age_s < 1:
            raise ValueError(f"a session's maximum age must be an int >= 1, not {max_age_s!r}")
        self.token = token
        self.max_age_s = max_age_s
        key = token.encode() if token is not None else secrets.token_bytes(32)
        self._session_key = hmac.new(key, b"fastq dashboard session", hashlib.sha256).digest()
        self._csrf_key = hmac.new(key, b"fastq dashboard csrf", hashlib.sha256).digest()
        self._token_digest = hashlib.sha256(key).digest()
        self.throttle = LoginThrottle()

    def _mac(self, nonce: str, issued: int, epoch: int) -> str:
        said = f"{nonce}.{issued}.{epoch}".encode()
        return hmac.new(self._session_key, said, hashlib.sha256).hexdigest()

    def new_cookie(self, epoch: int, now: Optional[float] = None) -> str:
        """A new session's cookie, issued now, in the namespace's ``epoch``."""
        nonce = secrets.token_urlsafe(16)
        issued = int(time.time() if now is None else now)
        return f"{nonce}.{issued}.{self._mac(nonce, issued, epoch)}"

    def check_token(self, given: str) -> bool:
        """Whether ``given`` is the token (compared as digests: the time taken says
        nothing of its length nor of how much of it matched)."""
        if self.token is None:
            return False
        digest = hashlib.sha256(given.strip().encode()).digest()
        return hmac.compare_digest(digest, self._token_digest)

    def bearer(self, request: Request) -> Optional[bool]:
        """Whether the request's ``Authorization: Bearer`` is the token; None: it
        sends none (no header, or another scheme: a proxy's ``Basic``)."""
        given = request.headers.get("authorization")
        if given is None or self.token is None:
            return None
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.check_token(value)

    def cookie_of(self, request: Request, now: Optional[float] = None) -> Optional[Cookie]:
        """The request's session cookie if it is well formed and not past its
        maximum age (its MAC is checked by :meth:`session_of`), else None."""
        nonce, issued, mac = (request.cookies.get(COOKIE, "").split(".") + ["", ""])[:3]
        if not (_NONCE.fullmatch(nonce) and issued.isascii() and issued.isdigit()):
            return None
        age = (time.time() if now is None else now) - int(issued)
        if not -_CLOCK_SLACK_S <= age <= self.max_age_s:
            return None
        return Cookie(nonce, int(issued), mac)

    def session_of(
        self, request: Request, epoch: int, revoked: bool = False, now: Optional[float] = None
    ) -> Optional[str]:
        """The session (its nonce) of a request that may see the pages, else None:
        the token as a bearer, or a session cookie made in ``epoch``, not past its
        age and not ``revoked`` (logged out: :mod:`fastq.protocol.dashboard`)."""
        bearer = self.bearer(request)
        if bearer is not None:
            return BEARER_NONCE if bearer else None
        cookie = self.cookie_of(request, now)
        if cookie is None or revoked:
            return None
        expected = self._mac(cookie.nonce, cookie.issued, epoch)
        return cookie.nonce if hmac.compare_digest(cookie.mac.encode(), expected.encode()) else None

    def time_left_s(self, request: Request) -> int:
        """How long the request's session cookie would still last (0: none)."""
        cookie = self.cookie_of(request)
        if cookie is None:
            return 0
        return max(0, cookie.issued + self.max_age_s - int(time.time()))

    def csrf(self, session: str) -> str:
        return self.sign(session, "csrf")

    def check_csrf(self, session: str, given: str) -> bool:
        return self.check_sign(session, "csrf", given)

    def sign(self, session: str, text: str) -> str:
        """An HMAC of ``text`` for ``session``: what only this dashboard could have
        said to it (a CSRF token, the message an action leaves on a page)."""
        said = f"{session}\x00{text}".encode()
        return hmac.new(self._csrf_key, said, hashlib.sha256).hexdigest()

    def check_sign(self, session: str, text: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.sign(session, text).encode())

    def login_nonce(self, request: Request) -> Optional[str]:
        """The nonce of the login form's cookie, if it has a well-formed one."""
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        return nonce if _NONCE.fullmatch(nonce) else None

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            max_age=self.max_age_s,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=root_of(request) + "/",
        )

    def set_login_cookie(self, request: Request, response: Response, nonce: str) -> None:
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            max_age=3600,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=root_of(request) + "/",
        )

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path=root_of(request) + "/")


class LoginThrottle:
    """Wrong tokens allowed per client address: :data:`ATTEMPTS` in
    :data:`WINDOW_S`, then none until the window has passed (the server's own
    count: each server behind a balancer keeps its own). It remembers at most
    :data:`CLIENTS` addresses, the oldest forgotten first."""

    ATTEMPTS = 5
    WINDOW_S = 60.0
    CLIENTS = 10_000

    def __init__(self) -> None:
        self._failures: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()  # logins are checked in the thread pool

    def wait_s(self, client: str, now: Optional[float] = None) -> float:
        """How long ``client`` must wait before it may try again (0: it may now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            failures = self._failures.get(client, [])
        recent = [at for at in failures if now - at < self.WINDOW_S]
        if len(recent) < self.ATTEMPTS:
            return 0.0
        return self.WINDOW_S - (now - recent[0])

    def failed(self, client: str, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            recent = [at for at in self._failures.pop(client, []) if now - at < self.WINDOW_S]
            self._failures[client] = [*recent, now][-self.ATTEMPTS :]
            while len(self._failures) > self.CLIENTS:
                self._failures.popitem(last=False)


def root_of(request: Request) -> str:
    """The path prefix every link and asset of the pages starts with: ``--root-path``
    (Starlette's ``root_path``), without a trailing ``/``; empty at ``/``."""
    return str(request.scope.get("root_path", "")).rstrip("/")


async def read_form(request: Request) -> dict[str, str]:
    """A POSTed ``application/x-www-form-urlencoded`` form: each field's first value
    (its body bounded in size and time by :mod:`fastq.serve.guard`)."""
    body = await request.body()
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}
