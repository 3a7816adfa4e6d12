"""``fastq serve`` as a user runs it (a subprocess on a free loopback port): the
token, the bind, the body's bound, bad jobs refused with nothing written, and
jobs read back over HTTP while a pool runs them."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import ROOT, fastq_cmd, subprocess_env
from tests.support.serve import TOKEN, Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

HTTP_APP = "tests.apps.http_jobs"


@pytest.fixture
def start(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Server]]:
    """Starts ``fastq serve`` subprocesses in the test's namespace; stops them all."""
    servers: list[Server] = []

    def run(*args: str, wait: bool = True, **kwargs: Any) -> Server:
        log = tmp_path / f"serve{len(servers)}.log"
        server = Server(redis_server.url, log, "--namespace", namespace, *args, **kwargs)
        servers.append(server)
        return server.started() if wait else server

    yield run
    for server in servers:
        server.stop()


def keys_of(r: redis.Redis, namespace: str) -> list[bytes]:
    return sorted(r.scan_iter(f"{namespace}:*"))


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
            "/api/v1/queues/web/jobs", content=b'{"name": "add"}',
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        assert reply.status_code == 415


def test_without_the_web_extra_serve_says_what_to_install(redis_server: RedisServer) -> None:
    code = "import sys; sys.modules['uvicorn'] = None; from fastq.cli.main import main; "
    code += "sys.exit(main(['serve']))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(redis_server.url), cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
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
                fastq_cmd("serve", *args), env=subprocess_env(redis_server.url, FASTQ_TOKEN=TOKEN),
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert done.stderr.startswith(f"fastq: error: {said}"), done.stderr
            assert len(done.stderr.splitlines()) == 1


def test_serve_help_lists_its_options(redis_server: RedisServer) -> None:
    done = subprocess.run(
        fastq_cmd("serve", "--help"), env=subprocess_env(redis_server.url),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    for option in ("--host", "--port", "--token-file", "--max-body", "--ssl-certfile"):
        assert option in done.stdout


def test_it_serves_https_itself_with_uvicorns_certificate_options(
    start: Callable[..., Server], tmp_path: Path
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
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


# -- bad jobs -----------------------------------------------------------------------

ADD = {"name": "add", "args": [1, 2]}
BAD_JOBS: list[tuple[Any, int, str]] = [
    (b'{"name": "add", ', 400, "the body is not valid JSON"),
    ("add", 400, "must be a job object or an array of them, not a string"),
    ([], 422, "an empty array: no job to enqueue"),
    ([ADD, 7], 422, "jobs[1] must be a job object, not a number"),
    ([ADD, {"name": "add", "args": [1]}], 422,
     "jobs[1]: arguments do not fit add(a: int, b: int) -> int: missing a required argument: 'b'"),
    ({"name": "add", "args": [1, 2, 3]}, 422, "the job: arguments do not fit add("),
    ({**ADD, "priority": "high"}, 422, "the job: priority must be an int, not str"),
    ([ADD, {**ADD, "tagz": ["x"]}], 422, "jobs[1].tagz: unknown field (a job's fields: name,"),
    ({**ADD, "name": ""}, 422, "name: the job's name must be a non-empty string"),
    ({"name": "add", "args": {"a": 1}}, 422, "args: must be an array, not an object"),
    ({"name": "add", "kwargs": [1, 2]}, 422, "kwargs: must be an object, not an array"),
    ({**ADD, "delay_s": 5, "at": 1}, 422, "give delay_s or at, not both"),
    ({**ADD, "delay_s": -1}, 422, "delay_s must be a finite number of seconds within [0,"),
    ({**ADD, "at": "2026-12-01T09:00:00"}, 422, "at: '2026-12-01T09:00:00' has no UTC offset"),
    ({**ADD, "at": "tomorrow"}, 422, "at: 'tomorrow' is not Unix seconds nor an ISO 8601 time"),
    ([{**ADD, "id": "a"}, {**ADD, "id": "b"}, {**ADD, "id": "a"}], 422,
     "jobs[2].id: 'a' is also jobs[0]'s"),
    ({**ADD, "id": "has space"}, 422, "invalid job_id 'has space'"),
    ({**ADD, "id": "fastq:x"}, 422, "reserved for fastq"),
    ({**ADD, "tags": "urgent"}, 422, "tags must be a list of str, not str"),
    ({**ADD, "retries": -1}, 422, "retries must be within 0.."),
    ({**ADD, "unique_key": "k"}, 422, "unique_key and unique_until need unique_for_s"),
    # orjson would read it as a float, in silence
    ({"name": "add", "args": [1, 18446744073709551616]}, 422, "Integer exceeds 64-bit range"),
    (b'{"name": "add", "args": [1, NaN]}', 400, "the body is not valid JSON: NaN is not JSON"),
    (b"[" * 100_000, 400, "the body's JSON is nested too deeply"),
    (b'{"name": "add", "args": [1, ' + b"[" * 300 + b"]" * 300 + b"]}", 422, "Recursion limit"),
    ([{"name": "x"}] * 10_001, 422, "10,001 jobs in one request, more than 10,000"),
]  # fmt: skip


def test_bad_jobs_are_refused_naming_the_fault_and_nothing_is_written(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        for body, status, said in BAD_JOBS:
            if isinstance(body, bytes):
                reply = client.post(
                    "/api/v1/queues/web/jobs", content=body,
                    headers={"Content-Type": "application/json"},
                )  # fmt: skip
            else:
                reply = client.post("/api/v1/queues/web/jobs", json=body)
            assert reply.status_code == status, (body, reply.text)
            assert said in reply.json()["error"], (body, reply.text)
        reply = client.post(
            "/api/v1/queues/web/jobs", content=b'{"name": "add"}',
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        assert reply.status_code == 415
        assert reply.json() == {
            "error": "a request body must be JSON: send Content-Type: application/json"
        }
        # a queue that no job of the app uses and Redis does not know: a typo
        reply = client.post("/api/v1/queues/wbe/jobs", json=ADD)
        assert reply.status_code == 404
        assert reply.json()["error"].startswith("unknown queue 'wbe'")
        reply = client.post("/api/v1/queues/a%20b/jobs", json=ADD)
        assert reply.status_code == 422 and "invalid queue name" in reply.json()["error"]
    assert keys_of(r, namespace) == []  # not a job, not even the queue's name


# -- jobs read back while a pool runs them --------------------------------------------


def _pool(url: str, namespace: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            fastq_cmd("pool", "--app", HTTP_APP, "--namespace", namespace, "-q", "web", "-c", "1"),
            env=subprocess_env(url), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=30)


def test_state_progress_and_result_read_back_over_http(
    start: Callable[..., Server],
    redis_server: RedisServer,
    r: redis.Redis,
    namespace: str,
    tmp_path: Path,
) -> None:
    server = start("--app", HTTP_APP)
    client = server.client()

    def job(job_id: str, **params: str) -> dict[str, Any]:
        reply = client.get(f"/api/v1/jobs/{job_id}", params=params)
        assert reply.status_code == 200, reply.text
        return reply.json()  # type: ignore[no-any-return]

    def enqueue(*jobs: dict[str, Any]) -> list[str]:
        reply = client.post("/api/v1/queues/web/jobs", json=list(jobs))
        assert reply.status_code == 200, reply.text
        return reply.json()["ids"]  # type: ignore[no-any-return]

    added, reporting, failing, later = enqueue(
        {"name": "add", "args": [2, 3], "id": "sum-1", "tags": ["sums"]},
        {"name": "report", "kwargs": {"steps": 10}},
        {"name": "boom", "args": ["smtp is down"]},
        {"name": "add", "args": [1, 1], "delay_s": 3600},
    )
    assert added == "sum-1"
    assert job(added)["state"] == "queued" and job(added)["tags"] == ["sums"]
    assert job(later, queue="web")["state"] == "scheduled"
    assert enqueue({"name": "add", "args": [9, 9], "id": "sum-1"}) == ["sum-1"]  # idempotent
    pool = _pool(redis_server.url, namespace, tmp_path / "pool.log")
    try:
        wait_until(lambda: job(added)["state"] == "done", 30, "add to run")
        done = job(added)
        assert done["result"] == 5 and done["attempts"] == 0 and done["error"] is None
        wait_until(lambda: r.llen(f"{namespace}:started") == 1, 30, "report to start")
        wait_until(lambda: job(reporting)["progress"] == 0.5, 30, "its progress")
        running = job(reporting)
        assert running["state"] == "active" and running["progress_meta"] == {"done": 5, "of": 10}
        assert "result" not in running and running["worker"]
        r.rpush(f"{namespace}:release", 1)
        wait_until(lambda: job(reporting)["state"] == "done", 30, "report to end")
        assert job(reporting)["result"] == {"steps": 10}
        wait_until(lambda: job(failing)["state"] == "dead", 30, "boom to die")
        dead = job(failing)
        assert dead["attempts"] == 1 and "RuntimeError: smtp is down" in dead["error"]
        assert "result" not in dead
        # cancel: once; then it says why not
        reply = client.delete(f"/api/v1/jobs/{later}")
        assert reply.json() == {"id": later, "stopped": True, "held": False}
        assert job(later)["state"] == "cancelled"
        reply = client.delete(f"/api/v1/jobs/{later}")
        assert reply.status_code == 409 and reply.json()["state"] == "cancelled"
        reply = client.delete(f"/api/v1/jobs/{added}")
        assert reply.status_code == 409 and "is done" in reply.json()["error"]
    finally:
        _stop(pool)
    assert client.get("/api/v1/jobs/no-such-job").status_code == 404
    assert client.delete("/api/v1/jobs/no-such-job").status_code == 404
    assert client.get("/api/v1/jobs/sum-1", params={"queue": "other"}).status_code == 404
    reply = client.get("/api/v1/jobs/a%20b")
    assert reply.status_code == 422 and "invalid job_id" in reply.json()["error"]
    client.close()


def test_queue_stats_pause_resume_and_rate_limit_over_http(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        client.post("/api/v1/queues/web/jobs", json=[ADD, ADD, {**ADD, "delay_s": 60}])
        stats = client.get("/api/v1/queues/web").json()
        assert stats["name"] == "web"
        assert (stats["stats"]["ready"], stats["stats"]["scheduled"]) == (2, 1)
        assert stats["stats"]["enqueued"] == 3
        listed = client.get("/api/v1/queues").json()["queues"]
        assert [q["name"] for q in listed] == ["web"] and listed[0]["stats"] == stats["stats"]
        assert client.post("/api/v1/queues/web/pause").json() == {"name": "web", "paused": True}
        assert client.get("/api/v1/queues/web").json()["stats"]["paused"] == 1
        assert client.post("/api/v1/queues/web/resume").json() == {"name": "web", "paused": False}
        assert client.get("/api/v1/queues/web").json()["stats"]["paused"] == 0
        reply = client.put("/api/v1/queues/web/rate_limit", json={"rate": 14, "burst": 2})
        limit = {"rate": 14, "per_s": 1.0, "burst": 2}
        assert reply.json() == {"name": "web", "rate_limit": limit}
        reply = client.put("/api/v1/queues/web/rate_limit", json={"rate": 0})
        assert reply.status_code == 422 and "rate" in reply.json()["error"]
        reply = client.put("/api/v1/queues/web/rate_limit", json={"per_s": 1})
        assert reply.status_code == 422 and reply.json()["error"].startswith("rate: required")
        reply = client.put("/api/v1/queues/web/rate_limit", json={"rate": None})
        assert reply.json() == {"name": "web", "rate_limit": None}
        for method, path in (
            ("GET", "/api/v1/queues/nope"),
            ("POST", "/api/v1/queues/nope/pause"),
            ("POST", "/api/v1/queues/nope/resume"),
            ("PUT", "/api/v1/queues/nope/rate_limit"),
        ):
            reply = client.request(method, path, json={"rate": 5} if method == "PUT" else None)
            assert reply.status_code == 404, (path, reply.text)
            assert reply.json()["error"].startswith("unknown queue 'nope'")
        assert client.get("/api/v1/nothing").json() == {"error": "Not Found"}
    assert not r.exists(f"{namespace}:{{nope}}:settings")


def test_two_servers_on_one_redis_answer_as_one(start: Callable[..., Server]) -> None:
    first, second = start("--app", HTTP_APP), start("--app", HTTP_APP)
    with first.client() as a, second.client() as b:
        ids = a.post("/api/v1/queues/web/jobs", json=[{**ADD, "id": "j1"}, ADD]).json()["ids"]
        assert b.get("/api/v1/jobs/j1").json()["state"] == "queued"
        # an id given to one server is known to the other: the second enqueue adds nothing
        assert b.post("/api/v1/queues/web/jobs", json={**ADD, "id": "j1"}).json() == {"ids": ["j1"]}
        assert b.delete(f"/api/v1/jobs/{ids[1]}").json()["stopped"] is True
        assert a.get(f"/api/v1/jobs/{ids[1]}").json()["state"] == "cancelled"
        a.post("/api/v1/queues/web/pause")
        assert b.get("/api/v1/queues/web").json()["stats"]["paused"] == 1
        assert a.get("/api/v1/queues/web").json() == b.get("/api/v1/queues/web").json()


def test_a_job_id_with_a_slash_is_read_and_cancelled_over_http(
    start: Callable[..., Server],
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        job = {**ADD, "id": "user/42/welcome", "delay_s": 60}
        assert client.post("/api/v1/queues/web/jobs", json=job).json() == {"ids": [job["id"]]}
        for path in ("/api/v1/jobs/user/42/welcome", "/api/v1/jobs/user%2F42%2Fwelcome"):
            assert client.get(path).json()["state"] == "scheduled"
        assert client.delete("/api/v1/jobs/user%2F42%2Fwelcome").json()["stopped"] is True
        assert client.get("/api/v1/jobs/user/42/welcome").json()["state"] == "cancelled"
        # another method on such a path is no request of this route: not found
        assert client.post("/api/v1/jobs/user/42/welcome").status_code == 404
        reply = client.patch("/api/v1/jobs/welcome")
        assert reply.status_code == 405
        assert sorted(reply.headers["allow"].split(", ")) == ["DELETE", "GET", "HEAD"]


def test_a_request_that_redis_takes_in_part_says_which_ids_went_in(
    namespace: str, tmp_path: Path
) -> None:
    # a Redis of its own that fills up partway through the second request
    with RedisServer(
        extra_args=["--maxmemory", "12mb", "--maxmemory-policy", "noeviction"]
    ) as small:
        server = Server(small.url, tmp_path / "serve.log", "--namespace", namespace).started()
        r = redis.Redis.from_url(small.url)
        jobs = [
            [{"name": "mail", "args": ["x" * 700], "id": f"{part}-{i}"} for i in range(8000)]
            for part in ("a", "b")
        ]
        try:
            with server.client() as client:
                first = client.post("/api/v1/queues/mail/jobs", json=jobs[0])
                assert first.status_code == 200 and len(first.json()["ids"]) == 8000
                second = client.post("/api/v1/queues/mail/jobs", json=jobs[1])
                assert second.status_code == 503, second.text
                refused = second.json()
                assert refused["error"].startswith("Redis refused the jobs (out of memory: ")
                written = refused["written"]
                assert 0 < len(written) < 8000
                in_redis = {k.decode() for k in r.hkeys(f"{namespace}:{{mail}}:jobs")}
                assert in_redis == {f"a-{i}" for i in range(8000)} | set(written)
                # room again: the same request, sent again, adds what was missing, once
                r.config_set("maxmemory", 0)
                again = client.post("/api/v1/queues/mail/jobs", json=jobs[1])
                assert again.json()["ids"] == [f"b-{i}" for i in range(8000)]
                assert r.hlen(f"{namespace}:{{mail}}:jobs") == 16_000
                assert r.llen(f"{namespace}:{{mail}}:ready") == 16_000
        finally:
            server.stop()
            r.close()


def test_each_job_of_a_mixed_request_keeps_its_own_options(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--app", HTTP_APP)
    jobs = [
        {**ADD, "id": "plain"},
        {**ADD, "id": "x1", "tags": ["x"]},
        {"name": "add", "kwargs": {"a": 1, "b": 2}, "id": "x2", "tags": ["x"]},
        {**ADD, "id": "later", "delay_s": 60, "tags": ["x"]},
        {**ADD, "id": "y", "tags": ["y"], "priority": 5},
        {
            "name": "add",
            "args": [1],
            "kwargs": {"b": 2},
            "id": "both",
            "tags": ["y"],
            "priority": 5,
        },
        {**ADD, "id": "plain2"},
    ]
    with server.client() as client:
        ids = client.post("/api/v1/queues/web/jobs", json=jobs).json()["ids"]
        assert ids == [job["id"] for job in jobs]
        seen = {i: client.get(f"/api/v1/jobs/{i}").json() for i in ids}
    assert {i: (v["state"], v["tags"]) for i, v in seen.items()} == {
        "plain": ("queued", []), "x1": ("queued", ["x"]), "x2": ("queued", ["x"]),
        "later": ("scheduled", ["x"]), "y": ("queued", ["y"]), "both": ("queued", ["y"]),
        "plain2": ("queued", []),
    }  # fmt: skip
    assert (seen["x2"]["kwargs"], seen["both"]["args"], seen["both"]["kwargs"]) == (
        {"a": 1, "b": 2}, [1], {"b": 2},
    )  # fmt: skip
    prio = f"{namespace}:{{web}}:prio"
    assert sorted(m.decode() for m in r.zrange(prio, 0, -1)) == ["both", "y"]
