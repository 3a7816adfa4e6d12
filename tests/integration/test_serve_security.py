"""``fastq serve`` as a user runs it (a subprocess on a free loopback port): the
token, the bind, its options, HTTPS, and the body's bound."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Callable

import httpx
import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.processes import ROOT, fastq_cmd, subprocess_env
from tests.support.serve import TOKEN, Server, keys_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


# -- the token ---------------------------------------------------------------------


def test_every_api_route_needs_the_token_and_it_is_never_logged(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start()
    wrong = "wrong-token-9876543210zyxwvu"
    calls = [
        ("GET", "/api/v1/queues", None),
        ("GET", "/api/v1/queues/web", None),
        ("POST", "/api/v1/queues/web/jobs", {"name": "add", "args": [1, 2]}),
        ("GET", "/api/v1/jobs/abc", None),
        ("DELETE", "/api/v1/jobs/abc", None),
        ("POST", "/api/v1/queues/web/pause", None),
        ("PUT", "/api/v1/queues/web/rate_limit", {"rate": 5}),
        ("GET", "/api/v1/openapi.json", None),
    ]
    for token, said in ((None, "no token"), (wrong, "wrong token"), (TOKEN[:-1], "wrong token")):
        with server.client(token=token) as client:
            for method, path, body in calls:
                reply = client.request(method, path, json=body)
                assert reply.status_code == 401, (method, path, reply.text)
                assert reply.json()["error"].startswith(said)
                assert reply.headers["www-authenticate"] == "Bearer"
    with server.client(token=None, headers={"Authorization": f"Basic {TOKEN}"}) as client:
        assert client.get("/api/v1/queues").status_code == 401
    assert keys_of(r, namespace) == []  # nothing was enqueued, paused or limited
    with server.client() as client:
        reply = client.get("/api/v1/queues")
        assert reply.json() == {"queues": []}
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["cache-control"] == "no-store"
        assert client.post("/api/v1/queues/web/jobs", json={"name": "add"}).status_code == 200
    log = server.log()
    assert 'GET /api/v1/queues HTTP/1.1" 401' in log  # the access log is on
    assert TOKEN not in log and wrong not in log and TOKEN[:-1] not in log


def test_a_bind_beyond_loopback_without_a_token_is_refused(
    start: Callable[..., Server],
) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        server = start("--host", host, token="", wait=False)
        assert server.wait() == 2
        lines = server.log().strip().splitlines()
        assert lines == [
            f"fastq: error: refusing to serve on {host} without a token: anyone who reaches "
            "it could enqueue and cancel jobs; give one with --token-file PATH or "
            "$FASTQ_TOKEN (or bind 127.0.0.1)"
        ]


def test_a_token_too_short_is_refused_without_showing_it(
    start: Callable[..., Server], tmp_path: Path
) -> None:
    server = start(token="sesame-123", wait=False)
    assert server.wait() == 2
    assert "$FASTQ_TOKEN is 10 characters: use at least 16" in server.log()
    assert "sesame-123" not in server.log()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")  # a file's trailing newline is not the token's
    server = start("--token-file", str(token_file), token=None)
    with server.client(token=TOKEN) as client:
        assert client.get("/api/v1/queues").status_code == 200
    with server.client(token=None) as client:
        assert client.get("/api/v1/queues").status_code == 401


def test_without_a_token_on_loopback_it_warns_and_answers_only_localhost(
    start: Callable[..., Server],
) -> None:
    server = start(token="")
    assert "WARNING fastq.cli: fastq serve: no token" in server.log()
    with server.client(token=None) as client:
        assert client.get("/api/v1/queues").status_code == 200
        assert client.get("/api/v1/queues", headers={"Host": "localhost"}).status_code == 200
        # a name rebound to 127.0.0.1 by a web page's DNS: refused
        reply = client.get("/api/v1/queues", headers={"Host": "evil.example:80"})
        assert reply.status_code == 403
        assert "answers only requests to localhost" in reply.json()["error"]
        # a browser's cross-site form post (text/plain, no preflight): refused
        reply = client.post(
            "/api/v1/queues/web/jobs",
            content=b'{"name": "add"}',
            headers={"Content-Type": "text/plain"},
        )
        assert reply.status_code == 415


def test_without_the_web_extra_serve_says_what_to_install(redis_server: RedisServer) -> None:
    code = "import sys; sys.modules['uvicorn'] = None; from fastq.cli.main import main; "
    code += "sys.exit(main(['serve']))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(redis_server.url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert (
        done.stderr == "fastq: error: fastq serve needs the web extra: pip install 'fastq[web]'\n"
    )


def test_bad_options_are_one_line_errors(redis_server: RedisServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, said in (
            (["--port", "70000"], "--port must be a whole number within 0..65535, not '70000'"),
            (["--max-body", "lots"], "invalid size 'lots': use e.g. 512M or 2G"),
            (["--port", str(port)], f"cannot listen on 127.0.0.1:{port}: [Errno 98]"),
        ):
            done = subprocess.run(
                fastq_cmd("serve", *args),
                env=subprocess_env(redis_server.url, FASTQ_TOKEN=TOKEN),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 2, done.stderr
            assert done.stderr.startswith(f"fastq: error: {said}"), done.stderr
            assert len(done.stderr.splitlines()) == 1


def test_serve_help_lists_its_options(redis_server: RedisServer) -> None:
    done = subprocess.run(
        fastq_cmd("serve", "--help"),
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    for option in ("--host", "--port", "--token-file", "--max-body", "--ssl-certfile"):
        assert option in done.stdout


def test_it_serves_https_itself_with_uvicorns_certificate_options(
    start: Callable[..., Server], tmp_path: Path
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = start("--ssl-certfile", str(cert), wait=False, token=TOKEN)
    assert server.wait() == 2
    assert "give --ssl-certfile and --ssl-keyfile together" in server.log()
    server = start("--ssl-certfile", str(cert), "--ssl-keyfile", str(key))
    assert f"listening on https://127.0.0.1:{server.port} " in server.log()
    url = f"https://localhost:{server.port}/api/v1/queues"
    trusted = ssl.create_default_context(cafile=str(cert))
    reply = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, verify=trusted)
    assert reply.json() == {"queues": []}
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(url.replace("https:", "http:"))


# -- the body's bound --------------------------------------------------------------


def _raw(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send a request's head and ``body`` (and no more) and read the reply, which must
    come without the rest of the body: the server refused while reading."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


def test_a_body_over_the_bound_is_refused_while_it_is_read(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--max-body", "64K")
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    path = b"POST /api/v1/queues/web/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    json_type = b"Content-Type: application/json\r\n"
    # a Content-Length above the bound: refused before a byte of the body is sent
    reply = _raw(server.port, path + auth + json_type + b"Content-Length: 65537\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b'"error":"the request body is larger than 65,536 bytes' in reply
    # a chunked body: refused once it passes the bound, its end never sent
    chunk = b"[" + b" " * 65535 + b" "  # 65,537 bytes
    head = path + auth + json_type + b"Transfer-Encoding: chunked\r\n\r\n"
    reply = _raw(server.port, head, b"%x\r\n%s\r\n" % (len(chunk), chunk))
    assert reply.startswith(b"HTTP/1.1 413 ")
    # the bound itself is taken
    jobs = [{"name": "add", "args": [i, i]} for i in range(1800)]
    body = httpx.Request("POST", "/", json=jobs).content
    assert len(body) < 65536
    with server.client() as client:
        assert len(client.post("/api/v1/queues/web/jobs", json=jobs).json()["ids"]) == 1800
    assert r.hlen(f"{namespace}:{{web}}:jobs") == 1800


def test_the_default_bound_is_8_mib(start: Callable[..., Server]) -> None:
    server = start()
    head = b"POST /api/v1/queues/web/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n".encode()
    reply = _raw(server.port, head + b"Content-Length: %d\r\n\r\n" % (8 * 1024 * 1024 + 1))
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"larger than 8,388,608 bytes" in reply
