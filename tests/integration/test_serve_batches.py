"""Batches over ``fastq serve``'s HTTP API (a subprocess on a free loopback port):
one opened, filled in several requests, closed, drained by a real worker and read
back ended; one cancelled; unknown and closed batches refused; the token required."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import redis

import fastq
from tests.support.pool import wait_until
from tests.support.serve import Server
from tests.support.workers import drain

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

HTTP_APP = "tests.apps.http_jobs"


def register(app: fastq.App, r: redis.Redis) -> None:
    """The jobs of tests.apps.http_jobs the test's worker runs, on the test's app."""

    @app.job(queue="web")
    def add(a: int, b: int) -> int:
        return a + b

    @app.job(queue="web")
    def batch_done(status: dict[str, Any]) -> None:
        r.rpush(f"{app.namespace}:batch_done", fastq.current_job().id)


def test_a_batch_opened_filled_and_closed_over_http_ends_when_its_jobs_do(
    start: Callable[..., Server], app: fastq.App, r: redis.Redis
) -> None:
    register(app, r)
    server = start("--app", HTTP_APP)
    with server.client() as client:
        reply = client.post(
            "/api/v1/batches",
            json={"description": "fifty sums", "on_complete": "batch_done", "meta": {"n": 50}},
        )
        assert reply.status_code == 200, reply.text
        opened = reply.json()
        batch_id = opened["id"]
        assert (opened["state"], opened["description"]) == ("open", "fifty sums")
        assert (opened["total"], opened["pending"]) == (0, 0)
        assert opened["callbacks"] == {"complete": "batch_done"}
        assert isinstance(opened["started_at"], float) and opened["ended_at"] is None
        for part in range(5):  # in several requests, as a client adds them
            jobs = [{"name": "add", "args": [part, i], "batch": batch_id} for i in range(10)]
            reply = client.post("/api/v1/queues/web/jobs", json=jobs)
            assert reply.status_code == 200, reply.text
            assert len(reply.json()["ids"]) == 10
        status = client.get(f"/api/v1/batches/{batch_id}").json()
        assert (status["state"], status["total"], status["pending"]) == ("open", 50, 50)
        assert status["queues"] == ["web"]
        reply = client.post(f"/api/v1/batches/{batch_id}/close")
        assert reply.status_code == 200, reply.text
        assert (reply.json()["state"], reply.json()["pending"]) == ("closed", 50)
        assert isinstance(reply.json()["closed_at"], float)
        drain(app, ["web"])
        status = client.get(f"/api/v1/batches/{batch_id}").json()
        counts = {k: status[k] for k in ("total", "pending", "done", "failed", "dead", "cancelled")}
        assert counts == {
            "total": 50,
            "pending": 0,
            "done": 50,
            "failed": 0,
            "dead": 0,
            "cancelled": 0,
        }
        assert status["state"] == "ended" and status["ended_at"] >= status["closed_at"]
        assert status["cancelled_at"] is None
        # the callback was enqueued once, with the batch's own id
        drain(app, ["web"])
        wait_until(lambda: r.llen(f"{app.namespace}:batch_done") == 1, 10, "the callback")
        assert r.lrange(f"{app.namespace}:batch_done", 0, -1) == [f"{batch_id}.complete".encode()]
        # an ended batch takes no job: a 409 naming it, nothing enqueued
        processed = app.stats("web")["processed"]
        reply = client.post(
            "/api/v1/queues/web/jobs", json={"name": "add", "args": [1, 2], "batch": batch_id}
        )
        assert reply.status_code == 409, reply.text
        assert reply.json() == {
            "error": f"batch {batch_id!r} is ended: no job joins it now",
            "batch": batch_id,
            "state": "ended",
        }
        assert app.stats("web")["ready"] == 0 and app.stats("web")["processed"] == processed


def test_a_batch_cancelled_over_http_and_refusals(
    start: Callable[..., Server], app: fastq.App, r: redis.Redis
) -> None:
    server = start("--app", HTTP_APP)
    with server.client() as client:
        first = client.post("/api/v1/batches", json={"id": "import-7"}).json()
        assert first["id"] == "import-7" and first["state"] == "open"
        jobs = [{"name": "add", "args": [1, i], "batch": "import-7"} for i in range(5)]
        assert client.post("/api/v1/queues/web/jobs", json=jobs).status_code == 200
        second = client.post("/api/v1/batches", json={"description": "later"}).json()
        listed = client.get("/api/v1/batches").json()["batches"]
        assert [(b["id"], b["total"]) for b in listed] == [(second["id"], 0), ("import-7", 5)]
        assert [b["id"] for b in client.get("/api/v1/batches?limit=1").json()["batches"]] == [
            second["id"]
        ]
        # no worker runs: every job is waiting, so the cancel stops them all and ends it
        reply = client.post("/api/v1/batches/import-7/cancel")
        assert reply.status_code == 200, reply.text
        cancelled = reply.json()
        assert cancelled["jobs_cancelled"] == 5
        status = cancelled["batch"]
        assert (status["state"], status["cancelled"], status["pending"]) == ("ended", 5, 0)
        assert isinstance(status["cancelled_at"], float)
        assert app.stats("web")["cancelled"] == 5
        reply = client.post("/api/v1/batches/import-7/cancel")
        assert reply.status_code == 409
        assert reply.json()["error"] == "batch 'import-7' has ended: nothing to cancel"
        # opening the id again: it is not open
        reply = client.post("/api/v1/batches", json={"id": "import-7"})
        assert (reply.status_code, reply.json()["state"]) == (409, "ended")
        # unknown batches: 404 to read, close or cancel; 409 to enqueue into, nothing in
        none = "no batch 'nope': never opened, or it expired (a batch is kept 7 days after it "
        none += "ended)"
        for method, path in (
            ("GET", "/api/v1/batches/nope"),
            ("POST", "/api/v1/batches/nope/close"),
            ("POST", "/api/v1/batches/nope/cancel"),
        ):
            reply = client.request(method, path)
            assert (reply.status_code, reply.json()) == (404, {"error": none}), path
        ready = app.stats("web")["ready"]
        reply = client.post(
            "/api/v1/queues/web/jobs", json={"name": "add", "args": [1, 2], "batch": "nope"}
        )
        assert reply.status_code == 409
        assert reply.json() == {
            "error": "batch 'nope' does not exist (never opened, or expired): no job joins it now",
            "batch": "nope",
            "state": "unknown",
        }
        assert app.stats("web")["ready"] == ready
        assert app.batch_status("nope") is None  # the enqueue opened none
        # bad input: 422 naming the field
        refused = [
            (
                "/api/v1/queues/web/jobs",
                [
                    {"name": "add", "args": [1, 2], "batch": second["id"]},
                    {"name": "add", "args": [1, 2]},
                ],
                f"jobs[1].batch: every job of a request joins one batch (jobs[0]'s: "
                f"{second['id']!r}), or none",
            ),
            (
                "/api/v1/queues/web/jobs",
                {"name": "add", "args": [1, 2], "batch": "a{b}"},
                "batch: a batch id holds no '{' nor '}': 'a{b}'",
            ),
            (
                "/api/v1/queues/web/jobs",
                {"name": "add", "args": [1, 2], "batch": 7},
                "batch: a batch id must be a str, not int",
            ),
            (
                "/api/v1/batches",
                {"on_complete": "add"},
                "on_complete: job 'add' must take one argument, the batch's status",
            ),
            (
                "/api/v1/batches",
                {"on_success": ""},
                "on_success: a job's name (a non-empty string), not a string",
            ),
            (
                "/api/v1/batches",
                {"descripton": "x"},
                "descripton: unknown field "
                "(fields: description, on_complete, on_success, meta, id)",
            ),
            ("/api/v1/batches", {"description": 5}, "description: must be a string, not a number"),
            ("/api/v1/batches", {"id": "has space"}, "id: invalid batch id 'has space'"),
            # its callback's id, '<id>.complete', would be no job id: it never called back
            (
                "/api/v1/batches",
                {"id": "b" * 192, "on_complete": "batch_done"},
                "a batch with callbacks has an id of at most 191 characters, not 192",
            ),
            (
                "/api/v1/batches",
                {"on_complete": "batch_done", "meta": {"blob": "x" * 70_000}},
                "meta is too large: the batch's callbacks and meta are 70,",
            ),
        ]
        for path, body, said in refused:
            reply = client.post(path, json=body)
            assert reply.status_code == 422, (body, reply.text)
            assert reply.json()["error"].startswith(said), (body, reply.text)
        reply = client.get("/api/v1/batches?limit=0")
        assert reply.status_code == 422 and reply.json()["error"].startswith("limit: ")
    # the token: every batch route needs it
    with server.client(token=None) as client:
        for method, path in (
            ("GET", "/api/v1/batches"),
            ("POST", "/api/v1/batches"),
            ("GET", f"/api/v1/batches/{second['id']}"),
            ("POST", f"/api/v1/batches/{second['id']}/close"),
            ("POST", f"/api/v1/batches/{second['id']}/cancel"),
        ):
            reply = client.request(method, path)
            assert reply.status_code == 401, (method, path)
            assert reply.json()["error"].startswith("no token")
    status = app.batch_status(second["id"])
    assert status is not None and status.state == "open"  # nothing closed nor cancelled it
