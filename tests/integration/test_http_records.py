"""What a job done over HTTP reads back as (``GET /api/v1/jobs/{id}``): its record
counts its attempts by the rule a pool's does (the run that succeeded included), and
a job whose envelope cannot be read says so rather than reading back as queued."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

import fastq
from fastq.protocol.contracts import ENQUEUE
from tests.support.http import ServedWorkers, post

pytestmark = pytest.mark.timeout(60)

Q = "hr"


@pytest.fixture
def http(app: fastq.App) -> Iterator[httpx.Client]:
    app.declare_queue(Q)
    server = ServedWorkers(app).start()
    with server.client() as client:
        yield client
    server.stop()


def claim_one(http: httpx.Client, deadline_s: float = 15) -> dict[str, Any]:
    """The next job claimed (a retry is claimed once its backoff is due)."""
    deadline = time.monotonic() + deadline_s
    while True:
        status, body = post(http, f"/api/v1/queues/{Q}/claim", {"max": 1, "lease_s": 30})
        assert status == 200, body
        if body["jobs"]:
            job: dict[str, Any] = body["jobs"][0]
            return job
        assert time.monotonic() < deadline, "no job came to claim"
        time.sleep(0.05)


def read(http: httpx.Client, job_id: str) -> dict[str, Any]:
    response = http.get(f"/api/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_job_done_over_http_counts_its_attempts_as_a_pools(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("resize", [1], queue=Q, job_id="once")
    job = claim_one(http)
    assert post(http, "/api/v1/jobs/once/done", {"token": job["token"]}) == (200, {"ok": True})
    view = read(http, "once")
    assert (view["state"], view["attempts"]) == ("done", 1)

    app.enqueue("resize", [2], queue=Q, job_id="twice", retries=1)
    job = claim_one(http)
    failed = post(http, "/api/v1/jobs/twice/fail", {"token": job["token"], "error": "e1"})
    assert failed == (200, {"ok": True, "outcome": "retry"})
    job = claim_one(http)
    assert job["attempt"] == 2
    assert post(http, "/api/v1/jobs/twice/done", {"token": job["token"]}) == (200, {"ok": True})
    view = read(http, "twice")
    assert (view["state"], view["attempts"], view["run_ms"]) == ("done", 2, None)


def test_an_envelope_that_cannot_be_read_reads_back_as_unreadable(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    # a raw-protocol producer's envelope with NaN in its args: the enqueue script
    # takes it, but it is no JSON
    keys = app.keys(Q)
    envelope = b'["resize", [1, NaN], 1796000000000]'
    argv = ENQUEUE.argv(0, 0, b"", ["nan"], [envelope])
    assert ENQUEUE.call(r, ENQUEUE.keys_for(keys), argv).added == 1
    view = read(http, "nan")
    assert view["state"] == "queued" and view["args"] == []
    assert view["unreadable"] is not None and view["unreadable"].startswith("not JSON")
    app.enqueue("resize", [1], queue=Q, job_id="fine")
    assert read(http, "fine")["unreadable"] is None
