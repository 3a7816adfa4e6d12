"""``fastq serve`` as a user runs it (a subprocess on a free loopback port): bad
jobs refused with nothing written, jobs read back over HTTP while a pool runs them,
the queues' routes, two servers as one, a Redis that fills up."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env
from tests.support.serve import Server, keys_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

HTTP_APP = "tests.apps.http_jobs"


# -- bad jobs -----------------------------------------------------------------------

ADD = {"name": "add", "args": [1, 2]}
BAD_JOBS: list[tuple[Any, int, str]] = [
    (b'{"name": "add", ', 400, "the body is not valid JSON"),
    ("add", 400, "must be a job object or an array of them, not a string"),
    ([], 422, "an empty array: no job to enqueue"),
    ([ADD, 7], 422, "jobs[1] must be a job object, not a number"),
    (
        [ADD, {"name": "add", "args": [1]}],
        422,
        "jobs[1]: arguments do not fit add(a: int, b: int) -> int: "
        "missing a required argument: 'b'",
    ),
    ({"name": "add", "args": [1, 2, 3]}, 422, "the job: arguments do not fit add("),
    ({**ADD, "priority": "high"}, 422, "the job: priority must be an int, not str"),
    ([ADD, {**ADD, "tagz": ["x"]}], 422, "jobs[1].tagz: unknown field (a job's fields: name,"),
    ({**ADD, "name": ""}, 422, "name: the job's name must be a non-empty string"),
    ({"name": "add", "args": {"a": 1}}, 422, "args: must be an array, not an object"),
    ({"name": "add", "kwargs": [1, 2]}, 422, "kwargs: must be an object, not an array"),
    ({**ADD, "delay_s": 5, "at": 1}, 422, "give delay_s or at, not both"),
    ({**ADD, "delay_s": -1}, 422, "delay_s must be a finite number of seconds within [0,"),
    # a number too large for a float (it was a 500)
    (b'{"name": "add", "args": [1, 2], "delay_s": 1' + b"0" * 400 + b"}", 422, "delay_s must be"),
    ({**ADD, "at": "2026-12-01T09:00:00"}, 422, "at: '2026-12-01T09:00:00' has no UTC offset"),
    ({**ADD, "at": "tomorrow"}, 422, "at: 'tomorrow' is not Unix seconds nor an ISO 8601 time"),
    (
        [{**ADD, "id": "a"}, {**ADD, "id": "b"}, {**ADD, "id": "a"}],
        422,
        "jobs[2].id: 'a' is also jobs[0]'s",
    ),
    ({**ADD, "id": "has space"}, 422, "invalid job_id 'has space'"),
    ({**ADD, "id": "fastq:x"}, 422, "reserved for fastq"),
    ({**ADD, "tags": "urgent"}, 422, "tags must be a list of str, not str"),
    ({**ADD, "group": ""}, 422, "invalid group '': it must be 1 to 100 printable characters"),
    ({**ADD, "group": "a\tb"}, 422, "invalid group 'a\\tb'"),
    ({**ADD, "group": 7}, 422, "group must be a str, not int"),
    ({**ADD, "retries": -1}, 422, "retries must be within 0.."),
    ({**ADD, "unique_key": "k"}, 422, "unique_key and unique_until need unique_for_s"),
    # orjson would read it as a float, in silence
    ({"name": "add", "args": [1, 18446744073709551616]}, 422, "args[1] is an int beyond 64 bits"),
    (b'{"name": "add", "args": [1, NaN]}', 400, "the body is not valid JSON: NaN is not JSON"),
    (b"[" * 100_000, 400, "the body's JSON is nested too deeply"),
    (b'{"name": "add", "args": [1, ' + b"[" * 300 + b"]" * 300 + b"]}", 422, "Recursion limit"),
    ([{"name": "x"}] * 10_001, 422, "10,001 jobs in one request, more than 10,000"),
]


def test_bad_jobs_are_refused_naming_the_fault_and_nothing_is_written(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        for body, status, said in BAD_JOBS:
            if isinstance(body, bytes):
                reply = client.post(
                    "/api/v1/queues/web/jobs",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
            else:
                reply = client.post("/api/v1/queues/web/jobs", json=body)
            assert reply.status_code == status, (body, reply.text)
            assert said in reply.json()["error"], (body, reply.text)
        reply = client.post(
            "/api/v1/queues/web/jobs",
            content=b'{"name": "add"}',
            headers={"Content-Type": "text/plain"},
        )
        assert reply.status_code == 415
        assert reply.json() == {
            "error": "a POST to the API must say Content-Type: application/json, even with no body"
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
            env=subprocess_env(url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


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
        assert (
            done["result"] == 5 and done["attempts"] == 1 and done["error"] is None
        )  # its record: the runs it took
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
        # a number too large for a float is bad input, not a crash (it was a 500)
        huge = b'{"rate": 5, "per_s": 1' + b"0" * 400 + b"}"
        reply = client.put(
            "/api/v1/queues/web/rate_limit",
            content=huge,
            headers={"Content-Type": "application/json"},
        )
        assert reply.status_code == 422 and "per_s" in reply.json()["error"], reply.text
        # a page number of digits that are not ASCII ('²'), or of too many, is the first
        # page, not a crash (it was a 500)
        for page in ("%C2%B2", "9" * 5000):
            reply = client.get(f"/queues/web?page={page}")
            assert reply.status_code == 200 and "<title>web · fastq</title>" in reply.text
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


def test_jobs_enqueued_over_http_join_their_groups(
    start: Callable[..., Server], r: redis.Redis, namespace: str
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        body = [{**ADD, "group": "tenant-1"}, {**ADD, "group": "tenant-2"}, ADD]
        reply = client.post("/api/v1/queues/web/jobs", json=body)
        assert reply.status_code == 200, reply.text
    ring = r.lrange(f"{namespace}:{{web}}:group_ring", 0, -1)
    assert ring == [b"", b"tenant-1", b"tenant-2"]
    assert r.zcard(f"{namespace}:{{web}}:group_ready") == 2
    assert r.llen(f"{namespace}:{{web}}:ready") == 1


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
        "plain": ("queued", []),
        "x1": ("queued", ["x"]),
        "x2": ("queued", ["x"]),
        "later": ("scheduled", ["x"]),
        "y": ("queued", ["y"]),
        "both": ("queued", ["y"]),
        "plain2": ("queued", []),
    }
    assert (seen["x2"]["kwargs"], seen["both"]["args"], seen["both"]["kwargs"]) == (
        {"a": 1, "b": 2},
        [1],
        {"b": 2},
    )
    prio = f"{namespace}:{{web}}:prio"
    assert sorted(m.decode() for m in r.zrange(prio, 0, -1)) == ["both", "y"]
