"""A queue that only HTTP clients use, with no Python and no restart: declared over
HTTP (``PUT /api/v1/queues/{q}``) or by another process's ``declare_queue``, it is
enqueued to and claimed from at once; a claim on a queue nobody declared is a 404
naming the known ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.http import ServedWorkers, post

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def http(app: fastq.App) -> Iterator[httpx.Client]:
    # the server's app registers a job, so it refuses an enqueue on a queue unknown
    app.job(name="resize", queue="media")(lambda: None)
    server = ServedWorkers(app).start()
    with server.client() as client:
        yield client
    server.stop()


def put(http: httpx.Client, queue: str, body: Any = None) -> tuple[int, Any]:
    response = http.put(f"/api/v1/queues/{queue}", json=body)
    return response.status_code, response.json()


def enqueue(http: httpx.Client, queue: str, job_id: str) -> tuple[int, Any]:
    return post(http, f"/api/v1/queues/{queue}/jobs", {"name": "thumb", "id": job_id})


def claim(http: httpx.Client, queue: str, n: int = 10) -> tuple[int, Any]:
    return post(http, f"/api/v1/queues/{queue}/claim", {"max": n, "worker": "node"})


def test_a_queue_declared_over_http_is_fed_and_drained_with_no_restart(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    assert enqueue(http, "images", "i0")[0] == 404  # nobody declared it yet
    status, body = claim(http, "images")
    assert status == 404 and "unknown queue 'images'" in body["error"]
    assert body["queues"] == ["default", "media"]

    limit = {"rate": 100, "per_s": 1.0, "burst": 5}
    shown = {"name": "images", "shards": 2, "rate_limit": limit}
    assert put(http, "images", {"shards": 2, "rate_limit": {"rate": 100}}) == (200, shown)
    assert r.hget(f"{app.namespace}:shards", "images") == b"2"
    assert app.rate_limit("images") == fastq.validate.RateLimit(100, 1000, 5)
    # the same settings again change nothing (a limit set again would start afresh)
    r.hset(app.keys("images").settings, "rate_tat_us", "12345")
    assert put(http, "images", {"shards": 2, "rate_limit": limit}) == (200, shown)
    assert put(http, "images", {}) == (200, shown)  # no settings: only declared
    assert r.hget(app.keys("images").settings, "rate_tat_us") == b"12345"

    ids = [f"i{n}" for n in range(6)]
    for job_id in ids:
        assert enqueue(http, "images", job_id) == (200, {"ids": [job_id]})
    # spread over both shards, each a queue in Redis
    assert all(r.hlen(app.keys(name).jobs) > 0 for name in ("images", "images#1"))
    drained: list[str] = []
    for _ in range(20):
        status, body = claim(http, "images")
        assert status == 200, body
        for job in body["jobs"]:
            done = post(http, f"/api/v1/jobs/{job['id']}/done", {"token": job["token"]})
            assert done == (200, {"ok": True})
            drained.append(job["id"])
        if len(drained) == len(ids):
            break
    assert sorted(drained) == ids
    assert app.stats("images")["processed"] == len(ids)

    # lifting the limit, and a rate limit set on a queue declared so
    assert put(http, "images", {"rate_limit": None}) == (200, {**shown, "rate_limit": None})
    assert app.rate_limit("images") is None


def test_a_conflicting_shard_count_is_409_and_bad_settings_422_writing_nothing(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    assert put(http, "images", {"shards": 2})[0] == 200
    status, body = put(http, "images", {"shards": 3})
    assert status == 409 and "has 2 shards in Redis" in body["error"], body
    assert r.hget(f"{app.namespace}:shards", "images") == b"2"

    bad: list[tuple[Any, int, str]] = [
        ({"shards": 0}, 422, "shards must be within 1..64, not 0"),
        ({"shards": "2"}, 422, "shards must be an int, not str"),
        ({"shards": True}, 422, "shards must be an int, not bool"),
        ({"rate_limit": {"rate": 0}}, 422, "rate must be"),
        ({"rate_limit": {}}, 422, "rate: required"),
        ({"rate_limit": {"rate": 5, "per": 1}}, 422, "per: unknown field"),
        ({"rate_limit": 5}, 400, "rate_limit: must be a JSON object, not a number"),
        ({"shard": 2}, 422, "shard: unknown field (fields: shards, rate_limit)"),
        ([1], 400, "the body must be a JSON object, not an array"),
    ]
    for settings, code, said in bad:
        status, body = put(http, "fresh", settings)
        assert status == code and said in body["error"], (settings, body)
    status, body = put(http, "bad name!", {})
    assert status == 422, body
    assert not r.sismember(f"{app.namespace}:queues", "fresh")
    assert r.hget(f"{app.namespace}:shards", "fresh") is None


def test_a_queue_declared_by_another_process_is_known_to_the_server_at_once(
    app: fastq.App, redis_server: RedisServer, http: httpx.Client
) -> None:
    assert enqueue(http, "thumbs", "t0")[0] == 404
    other = fastq.App(redis_server.url, namespace=app.namespace)  # another process's app
    try:
        other.job(name="thumb", queue="elsewhere")(lambda: None)
        other.declare_queue("thumbs")
    finally:
        other.close()
    assert enqueue(http, "thumbs", "t1") == (200, {"ids": ["t1"]})
    status, body = claim(http, "thumbs")
    assert status == 200 and [job["id"] for job in body["jobs"]] == ["t1"]
