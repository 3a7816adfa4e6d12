"""``fastq serve``'s door as a browser, a proxy and a slow client meet it (a
subprocess on a free loopback port): requests from another site refused in every
mode, a server with no token refused behind a proxy, every client bounded in time,
and the dashboard's sessions (their age, logout, a revocation of them all, login's
CSRF token and throttle, Secure behind a TLS proxy, messages no link can forge)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import httpx
import orjson
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import ROOT, fastq_cmd, subprocess_env
from tests.support.serve import TOKEN, Server, keys_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# what a page on another site makes a browser send: a form's POST, no body
CROSS_SITE = {
    "Origin": "https://evil.example",
    "Sec-Fetch-Site": "cross-site",
    "Content-Type": "application/x-www-form-urlencoded",
}


HTTP_APP = "tests.apps.http_jobs"  # its jobs are on queue "web"


def open_client(server: Server, token: Optional[str], **kwargs: Any) -> httpx.Client:
    """A client with no default Content-Type (a browser's, a form's)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(kwargs.pop("headers", {}))
    return httpx.Client(base_url=server.base_url, headers=headers, timeout=30, **kwargs)


def enqueue_some(server: Server, n: int) -> None:
    with server.client() as client:
        for i in range(n):
            reply = client.post("/api/v1/queues/web/jobs", json={"name": "add", "args": [i, i]})
            assert reply.status_code == 200, reply.text


# -- cross-site requests -------------------------------------------------------------


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_page_on_another_site_can_neither_pause_a_queue_nor_claim_its_jobs(
    start: Callable[..., Server], namespace: str, r: redis.Redis, token: Optional[str]
) -> None:
    server = start("--app", HTTP_APP, token=token)
    enqueue_some(server, 5)
    before = {key: r.dump(key) for key in keys_of(r, namespace)}
    with open_client(server, token) as client:
        for path in ("/api/v1/queues/web/pause", "/api/v1/queues/web/claim"):
            reply = client.post(path, headers=CROSS_SITE, content=b"")
            assert reply.status_code == 403, (path, reply.text)
            assert reply.json() == {"error": "a request from another site is refused"}
            # the browser with no Sec-Fetch-Site: its Origin says enough
            reply = client.post(
                path, headers={"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}
            )
            assert reply.status_code == 403
            # nor any form, from anywhere: a POST must say it is JSON, body or none
            reply = client.post(path, headers={"Content-Type": CROSS_SITE["Content-Type"]})
            assert reply.status_code == 415, reply.text
        # the dashboard's own actions too (their forms carry a CSRF token as well)
        reply = client.post("/queues/web/pause", headers=CROSS_SITE, content=b"csrf=x")
        assert reply.status_code == 403
    # nothing paused, nothing claimed: Redis as it was
    assert {key: r.dump(key) for key in keys_of(r, namespace)} == before
    with server.client(token=token) as client:
        reply = client.post(
            "/api/v1/queues/web/pause",
            headers={"Origin": server.base_url, "Sec-Fetch-Site": "same-origin"},
        )
        assert reply.json() == {"name": "web", "paused": True}


# -- a server with no token, behind a proxy ------------------------------------------


def test_a_server_with_no_token_takes_nothing_through_a_proxy(
    start: Callable[..., Server], redis_server: RedisServer
) -> None:
    server = start(token="")
    with server.client(token=None) as client:
        assert client.get("/api/v1/queues").status_code == 200
        assert client.get("/").status_code == 200
        # nginx's sample without proxy_set_header Host: Host is 127.0.0.1 still
        for proxied in ({"X-Forwarded-For": "203.0.113.9"}, {"Via": "1.1 nginx"}):
            for path in ("/api/v1/queues", "/"):
                reply = client.get(path, headers=proxied)
                assert reply.status_code == 403, (path, proxied)
                assert "through a proxy" in reply.text
    # and it refuses to start where only a proxy would reach it
    for option in (["--root-path", "/fastq"], ["--forwarded-allow-ips", "127.0.0.1"]):
        out = subprocess.run(
            fastq_cmd("serve", "--port", "0", *option),
            env=subprocess_env(redis_server.url),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, out
        assert "refusing --root-path and --forwarded-allow-ips without a token" in out.stderr


def asgi_get(asgi: Any, path: str, root_path: str = "", **headers: str) -> tuple[int, Any]:
    """A GET straight into an ASGI app, as uvicorn would send it: (status, JSON)."""
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "path": path,
        "raw_path": path.encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": [(k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(asgi(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], orjson.loads(body) if body else None


def test_the_api_embedded_under_a_prefix_ending_in_a_slash_still_needs_its_token(
    app: fastq.App,
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from fastq.serve.app import create_app

    outer = Starlette(routes=[Mount("/fq/", app=create_app(app, TOKEN))])
    for path in ("/fq//api/v1/queues", "/fq/api/v1/queues", "/fq/api//v1/queues"):
        status, reply = asgi_get(outer, path)
        assert status in (401, 404), (path, reply)
        assert status == 404 or reply["error"].startswith("no token")
    status, reply = asgi_get(outer, "/fq/api/v1/queues", authorization=f"Bearer {TOKEN}")
    assert (status, reply) == (200, {"queues": []})
    # served by uvicorn --root-path /fq/ (a request for /api/v1/queues): what Starlette
    # routes to the API, the guard guards
    inner = create_app(app, TOKEN)
    status, reply = asgi_get(inner, "/fq//api/v1/queues", root_path="/fq/")
    assert status == 401 and reply["error"].startswith("no token")


def test_the_api_checks_the_token_again_past_the_guard(app: fastq.App) -> None:
    from fastq.serve.app import create_app

    asgi = create_app(app, TOKEN)

    async def past_the_guard(scope: Any, receive: Any, send: Any) -> None:
        scope["app"] = asgi  # the router alone, as if the guard had missed the path
        await asgi.router(scope, receive, send)

    status, reply = asgi_get(past_the_guard, "/api/v1/queues")
    assert status == 401 and reply["error"].startswith("no token")
    status, reply = asgi_get(past_the_guard, "/api/v1/queues", authorization=f"Bearer {TOKEN}")
    assert (status, reply) == (200, {"queues": []})


# -- slow clients ---------------------------------------------------------------------


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return sock


def _closed_within(sock: socket.socket, timeout_s: float) -> Optional[bytes]:
    """What the server sent before it closed the connection, or None if it is still
    open after ``timeout_s``."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got
            got += chunk
    except socket.timeout:
        return None
    except ConnectionResetError:
        return got


def test_slow_clients_are_cut_off_while_others_are_served(
    start: Callable[..., Server],
) -> None:
    server = start("--client-timeout", "1.5")
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    # headers trickled a line at a time, never ending: closed at the deadline
    trickler = _connect(server.port)
    trickler.sendall(b"GET /api/v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    # headers that announce a body that never comes: 408 at the deadline
    no_body = _connect(server.port)
    no_body.sendall(
        b"POST /api/v1/queues/web/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n" + auth + b"\r\n{"
    )
    # connections that never send a byte: closed at the deadline
    idle = [_connect(server.port) for _ in range(50)]
    started = time.monotonic()
    served = 0
    with server.client() as client:
        while time.monotonic() - started < 1.2:
            trickler.sendall(b"X-Slow: 1\r\n")
            assert client.get("/api/v1/queues").status_code == 200
            served += 1
            time.sleep(0.1)
    assert served >= 5  # the others were served meanwhile
    assert _closed_within(trickler, 15) == b""
    reply = _closed_within(no_body, 15)
    assert reply is not None and reply.startswith(b"HTTP/1.1 408 "), reply
    assert b"did not all come within 1.5 s" in reply
    for sock in idle:
        assert _closed_within(sock, 15) == b""
    # a connection kept alive after a response, then silent: closed as well
    kept = _connect(server.port)
    kept.sendall(b"GET /api/v1/queues HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"\r\n")
    first = b""
    while not first.endswith(b'{"queues":[]}'):
        first += kept.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    kept.sendall(b"GET /api/v1/queues HTTP/1.1\r\n")
    assert _closed_within(kept, 15) == b""
    for sock in (trickler, no_body, kept, *idle):
        sock.close()
    with server.client() as client:
        assert client.get("/api/v1/queues").status_code == 200


def test_requests_beyond_the_concurrency_limit_are_answered_503(
    start: Callable[..., Server],
) -> None:
    server = start("--limit-concurrency", "3", "--client-timeout", "30")
    held = [_connect(server.port) for _ in range(3)]
    time.sleep(0.2)  # accepted: uvicorn counts them
    with server.client() as client:
        reply = client.get("/api/v1/queues")
        assert reply.status_code == 503
    for sock in held:
        sock.close()

    def served() -> bool:
        with server.client() as client:
            return client.get("/api/v1/queues").status_code == 200

    wait_until(served, 10, "the server to serve again")


# -- the dashboard's sessions -----------------------------------------------------------


def _log_in(client: httpx.Client, token: str = TOKEN) -> httpx.Response:
    page = client.get("/login")
    assert page.status_code == 200
    csrf = _csrf_of(page.text, "login_csrf")
    return client.post("/login", data={"token": token, "login_csrf": csrf, "next": "/"})


def _csrf_of(page: str, name: str = "csrf") -> str:
    found = re.search(rf'name="{name}" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


def test_logout_ends_the_session_even_for_a_copy_of_its_cookie(
    start: Callable[..., Server],
) -> None:
    server = start()
    with open_client(server, None) as browser:
        assert _log_in(browser).status_code == 303
        cookie = browser.cookies["fastq_session"]
        overview = browser.get("/")
        assert overview.status_code == 200
        # logging out takes the session's CSRF token
        assert browser.post("/logout", data={}).status_code == 403
        assert browser.post("/logout", data={"csrf": _csrf_of(overview.text)}).status_code == 303
    with open_client(server, None, cookies={"fastq_session": cookie}) as copy:
        reply = copy.get("/", headers={"Accept": "text/html"})
        assert reply.status_code == 303 and reply.headers["location"].startswith("/login")


def test_revoke_sessions_ends_every_session_on_every_server(
    start: Callable[..., Server], redis_server: RedisServer, namespace: str
) -> None:
    one, other = start(), start()
    with open_client(one, None) as browser:
        assert _log_in(browser).status_code == 303
        cookie = browser.cookies["fastq_session"]
    with open_client(other, None, cookies={"fastq_session": cookie}) as there:
        assert there.get("/").status_code == 200  # any server with the token takes it
    out = subprocess.run(
        fastq_cmd("serve", "--namespace", namespace, "--revoke-sessions"),
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out
    assert f"every dashboard session of namespace {namespace!r} ended (epoch 1)" in out.stdout
    for server in (one, other):
        with open_client(server, None, cookies={"fastq_session": cookie}) as there:
            assert there.get("/").status_code == 303
    with open_client(one, None) as browser:  # a new login works
        assert _log_in(browser).status_code == 303
        assert browser.get("/").status_code == 200


def test_a_session_lasts_its_maximum_age(start: Callable[..., Server]) -> None:
    server = start("--session-max-age", "2")
    with open_client(server, None) as browser:
        reply = _log_in(browser)
        assert "Max-Age=2" in reply.headers["set-cookie"]
        assert browser.get("/").status_code == 200
        cookie = browser.cookies["fastq_session"]
    time.sleep(3.1)
    with open_client(server, None, cookies={"fastq_session": cookie}) as late:
        assert late.get("/").status_code == 303


def test_login_needs_its_form_and_wrong_tokens_are_throttled(
    start: Callable[..., Server],
) -> None:
    server = start()
    with open_client(server, None) as browser:
        # a POST from no form of this dashboard's (another site's, a script's)
        reply = browser.post("/login", data={"token": TOKEN, "next": "/"})
        assert reply.status_code == 403 and "fastq_session" not in reply.headers.get(
            "set-cookie", ""
        )
        for _ in range(5):
            assert _log_in(browser, "wrong-token-0123456789").status_code == 401
        reply = _log_in(browser)  # the right token, but too soon
        assert reply.status_code == 429
        assert 50 <= int(reply.headers["retry-after"]) <= 61
        assert "Too many wrong tokens" in reply.text
        assert "fastq_session" not in browser.cookies


def test_the_cookie_is_secure_behind_a_trusted_tls_proxy(start: Callable[..., Server]) -> None:
    trusted = start("--forwarded-allow-ips", "127.0.0.1")
    untrusted = start()  # the same headers from a proxy it does not trust: not believed
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.7"}
    for server, secure in ((trusted, True), (untrusted, False)):
        with open_client(server, None, headers=https) as browser:
            form = browser.get("/login")
            assert ("Secure" in form.headers["set-cookie"]) is secure
            # the cookie as a browser on https would send it back (httpx, on http, would not)
            nonce = re.search(r"fastq_login=([^;]+)", form.headers["set-cookie"])
            assert nonce is not None
            reply = browser.post(
                "/login",
                data={"token": TOKEN, "login_csrf": _csrf_of(form.text, "login_csrf")},
                headers={"Cookie": f"fastq_login={nonce.group(1)}"},
            )
            assert reply.status_code == 303
            assert ("Secure" in reply.headers["set-cookie"]) is secure


def test_a_proxys_basic_authorization_leaves_the_cookie_to_decide(
    start: Callable[..., Server],
) -> None:
    server = start()
    with open_client(server, None) as browser:
        assert _log_in(browser).status_code == 303
        reply = browser.get("/", headers={"Authorization": "Basic dXNlcjpwYXNz"})
        assert reply.status_code == 200


def test_a_link_cannot_put_words_on_a_page(start: Callable[..., Server]) -> None:
    server = start("--app", HTTP_APP)
    enqueue_some(server, 1)
    with open_client(server, None) as browser:
        assert _log_in(browser).status_code == 303
        forged = browser.get("/queues/web", params={"msg": "Your account is locked: call +1 555"})
        assert "Your account is locked" not in forged.text
        page = browser.get("/queues/web")
        reply = browser.post("/queues/web/pause", data={"csrf": _csrf_of(page.text)})
        assert reply.status_code == 303
        said = browser.get(reply.headers["location"])
        assert "paused" in said.text.lower()
        assert 'class="flash' in said.text


def test_serve_help_lists_the_doors_options(redis_server: RedisServer) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fastq", "serve", "--help"],
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    for option in (
        "--client-timeout",
        "--limit-concurrency",
        "--session-max-age",
        "--revoke-sessions",
        "--forwarded-allow-ips",
    ):
        assert option in out.stdout
