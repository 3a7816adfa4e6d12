"""The dashboard's door with no server: session cookies (an HMAC of a nonce keyed by
the token, never the token), CSRF tokens per session, and redirects that never leave
the site."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from fastq.serve.pages.handler import local_path
from fastq.serve.pages.session import BEARER_NONCE, COOKIE, LoginThrottle, Sessions

TOKEN = "s3cret-token-0123456789"


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw})


def test_a_cookie_is_an_hmac_of_a_nonce_and_is_checked_by_any_server_with_the_token() -> None:
    one, other = Sessions(TOKEN), Sessions(TOKEN)
    cookie = one.new_cookie(epoch=0)
    assert TOKEN not in cookie
    nonce, issued, mac = cookie.split(".")
    assert other.session_of(request({"cookie": f"{COOKIE}={cookie}"}), 0) == nonce
    assert one.new_cookie(0) != cookie  # a nonce per login
    for forged in (
        f"{nonce}.{issued}.{'0' * 64}",
        f"{'A' * 22}.{issued}.{mac}",
        f"{nonce}.{int(issued) + 1}.{mac}",  # its age is in its MAC
        f"{nonce}.{mac}",
        nonce,
        "",
    ):
        assert one.session_of(request({"cookie": f"{COOKIE}={forged}"}), 0) is None
    # another token: every session ends
    assert Sessions(TOKEN + "x").session_of(request({"cookie": f"{COOKIE}={cookie}"}), 0) is None


def test_a_session_ends_at_its_maximum_age_at_logout_and_with_a_new_epoch() -> None:
    sessions = Sessions(TOKEN, max_age_s=3600)
    cookie = sessions.new_cookie(epoch=7, now=1_000_000)
    at = request({"cookie": f"{COOKIE}={cookie}"})
    nonce = cookie.split(".")[0]
    assert sessions.session_of(at, 7, now=1_000_000 + 3600) == nonce
    assert sessions.session_of(at, 7, now=1_000_000 + 3601) is None  # too old
    assert sessions.session_of(at, 7, now=1_000_000 - 3600) is None  # from the future
    assert sessions.session_of(at, 8, now=1_000_001) is None  # --revoke-sessions
    assert sessions.session_of(at, 7, revoked=True, now=1_000_001) is None  # logged out


def test_the_bearer_header_opens_the_pages_and_a_wrong_one_does_not() -> None:
    sessions = Sessions(TOKEN)
    assert sessions.session_of(request({"authorization": f"Bearer {TOKEN}"}), 0) == BEARER_NONCE
    assert sessions.session_of(request({"authorization": "Bearer nope"}), 0) is None
    assert sessions.check_token(TOKEN) and not sessions.check_token(TOKEN[:-1])
    # another scheme is not the dashboard's (a proxy's Basic): the cookie decides
    cookie = sessions.new_cookie(0)
    basic = {"authorization": f"Basic {TOKEN}"}
    assert sessions.session_of(request(basic), 0) is None
    with_cookie = request({**basic, "cookie": f"{COOKIE}={cookie}"})
    assert sessions.session_of(with_cookie, 0) == cookie.split(".")[0]


def test_csrf_tokens_and_messages_are_signed_per_session() -> None:
    sessions = Sessions(TOKEN)
    a, b = sessions.csrf("nonce-a"), sessions.csrf("nonce-b")
    assert a != b
    assert sessions.check_csrf("nonce-a", a)
    assert not sessions.check_csrf("nonce-a", b)
    assert not sessions.check_csrf("nonce-a", "")
    assert not Sessions(TOKEN + "x").check_csrf("nonce-a", a)
    said = sessions.sign("nonce-a", "msg:3 jobs queued again")
    assert sessions.check_sign("nonce-a", "msg:3 jobs queued again", said)
    assert not sessions.check_sign("nonce-b", "msg:3 jobs queued again", said)
    assert not sessions.check_sign("nonce-a", "msg:Your account is locked", said)


def test_without_a_token_sessions_need_no_login_and_no_token_opens_them() -> None:
    sessions = Sessions(None)
    cookie = sessions.new_cookie(0)
    at = {"cookie": f"{COOKIE}={cookie}"}
    assert sessions.session_of(request({"host": "127.0.0.1:8000", **at}), 0) is not None
    assert not sessions.check_token("anything-at-all-0123")
    # a process's own secret: another server's cookie is none of its
    assert Sessions(None).session_of(request(at), 0) is None


def test_the_login_throttle_allows_five_wrong_tokens_a_minute_per_client() -> None:
    throttle = LoginThrottle()
    for i in range(5):
        assert throttle.wait_s("10.0.0.1", now=100.0 + i) == 0
        throttle.failed("10.0.0.1", now=100.0 + i)
    assert throttle.wait_s("10.0.0.1", now=105.0) == pytest.approx(55.0)
    assert throttle.wait_s("10.0.0.2", now=105.0) == 0  # per client
    assert throttle.wait_s("10.0.0.1", now=160.5) == 0  # the first has aged out


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
