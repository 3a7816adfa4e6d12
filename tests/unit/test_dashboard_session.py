"""The dashboard's door with no server: session cookies (an HMAC of a nonce keyed by
the token, never the token), CSRF tokens per session, and redirects that never leave
the site."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from fastq.serve.pages.handler import local_path
from fastq.serve.pages.session import BEARER_NONCE, COOKIE, Sessions

TOKEN = "s3cret-token-0123456789"


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw})


def test_a_cookie_is_an_hmac_of_a_nonce_and_is_checked_by_any_server_with_the_token() -> None:
    one, other = Sessions(TOKEN), Sessions(TOKEN)
    cookie = one.new_cookie()
    assert TOKEN not in cookie
    nonce, _, mac = cookie.partition(".")
    assert other.session_of(request({"cookie": f"{COOKIE}={cookie}"})) == nonce
    assert one.new_cookie() != cookie  # a nonce per login
    for forged in (f"{nonce}.{'0' * 64}", f"other.{mac}", nonce, ""):
        assert one.session_of(request({"cookie": f"{COOKIE}={forged}"})) is None
    # another token: every session ends
    assert Sessions(TOKEN + "x").session_of(request({"cookie": f"{COOKIE}={cookie}"})) is None


def test_the_bearer_header_opens_the_pages_and_a_wrong_one_does_not() -> None:
    sessions = Sessions(TOKEN)
    assert sessions.session_of(request({"authorization": f"Bearer {TOKEN}"})) == BEARER_NONCE
    assert sessions.session_of(request({"authorization": "Bearer nope"})) is None
    assert sessions.session_of(request({"authorization": f"Basic {TOKEN}"})) is None
    assert sessions.check_token(TOKEN) and not sessions.check_token(TOKEN[:-1])


def test_csrf_tokens_are_per_session() -> None:
    sessions = Sessions(TOKEN)
    a, b = sessions.csrf("nonce-a"), sessions.csrf("nonce-b")
    assert a != b
    assert sessions.check_csrf("nonce-a", a)
    assert not sessions.check_csrf("nonce-a", b)
    assert not sessions.check_csrf("nonce-a", "")
    assert not Sessions(TOKEN + "x").check_csrf("nonce-a", a)


def test_without_a_token_only_loopback_names_have_sessions() -> None:
    sessions = Sessions(None)
    cookie = sessions.new_cookie()
    at = {"cookie": f"{COOKIE}={cookie}"}
    assert sessions.session_of(request({"host": "127.0.0.1:8000", **at})) is not None
    assert sessions.session_of(request({"host": "evil.example", **at})) is None
    assert not sessions.check_token("anything-at-all-0123")


@pytest.mark.parametrize(
    ("where", "root", "kept"),
    [
        ("/queues/q?state=dead", "", True),
        ("/", "", True),
        ("//evil.example/", "", False),
        ("/\\evil.example/", "", False),
        ("https://evil.example/", "", False),
        ("queues/q", "", False),
        ("/fastq/queues/q", "/fastq", True),
        ("/queues/q", "/fastq", False),
        ("/fastq//evil.example", "/fastq", False),
        ("/queues/q\r\nSet-Cookie: x=1", "", False),
    ],
)
def test_redirects_stay_on_the_dashboard(where: str, root: str, kept: bool) -> None:
    assert (local_path(where, root) == where) is kept
