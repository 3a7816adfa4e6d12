"""Workers over HTTP (``fastq serve``'s worker routes), on a real redis-server and a
real uvicorn: claim, heartbeat, done and fail; a lease left to lapse comes back
through the reaper and runs once more, and the late ``done`` is refused and counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

import fastq
from fastq.reaper.reaper import Reaper
from fastq.testing.redis_server import RedisServer
from tests.support.http import ServedWorkers, post

Q = "hq"
# a token of the right shape whose claim holds nothing
SHAPED = f"{Q}:1000:w:{'0' * 32}"


@pytest.fixture
def served(app: fastq.App) -> Iterator[ServedWorkers]:
    app.declare_queue(Q)
    server = ServedWorkers(app).start()
    yield server
    server.stop()


@pytest.fixture
def http(served: ServedWorkers) -> Iterator[httpx.Client]:
    with served.client() as client:
        yield client


def claim(http: httpx.Client, n: int = 1, lease_s: float = 30, worker: str = "w") -> list[Any]:
    status, body = post(
        http, f"/api/v1/queues/{Q}/claim", {"max": n, "lease_s": lease_s, "worker": worker}
    )
    assert status == 200, body
    jobs: list[Any] = body["jobs"]
    return jobs


def done(http: httpx.Client, job: dict[str, Any], **more: Any) -> tuple[int, Any]:
    return post(http, f"/api/v1/jobs/{job['id']}/done", {"token": job["token"], **more})


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_past_deadline(app: fastq.App, r: redis.Redis, timeout_s: float = 10) -> None:
    """Until every lease of the queue has lapsed, by Redis' clock."""
    leases = app.keys(Q).leases
    deadline = time.monotonic() + timeout_s
    while True:
        latest = r.zrange(leases, -1, -1, withscores=True)
        if latest and latest[0][1] < redis_ms(r):
            return
        assert time.monotonic() < deadline, "the lease did not lapse"
        time.sleep(0.05)


def test_claim_heartbeat_done_round_trip(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("resize", [1, 2], queue=Q, job_id="j1")
    app.enqueue("resize", [], {"w": 3}, queue=Q, job_id="j2")
    app.enqueue("resize", [5], queue=Q, job_id="j3")
    jobs = claim(http, n=2, worker="node-1")
    assert [(j["id"], j["name"], j["args"], j["kwargs"], j["attempt"]) for j in jobs] == [
        ("j1", "resize", [1, 2], {}, 1),
        ("j2", "resize", [], {"w": 3}, 1),
    ]
    assert jobs[0]["token"] == jobs[1]["token"]  # one claim, one lease
    keys = app.keys(Q)
    (worker_id,) = [w.decode() for w in r.zrange(keys.leases, 0, -1)]
    assert worker_id.startswith("http:node-1:")
    assert jobs[0]["token"].split(":")[-1] not in worker_id  # the secret is not in Redis
    # `fastq workers` shows the claim as a worker holding its two jobs
    (holder,) = app.holders(Q)
    assert holder.worker == worker_id and sorted(holder.jobs) == ["j1", "j2"]

    beat = {"token": jobs[0]["token"], "progress": {"fraction": 0.5, "meta": "half"}}
    status, body = post(http, "/api/v1/jobs/j1/heartbeat", beat)
    assert (status, body) == (200, {"ok": True, "held": 2})
    info = app.get_job("j1")
    assert info is not None and info.state == "active" and info.worker == worker_id
    assert (info.progress, info.progress_meta) == (0.5, "half")

    assert done(http, jobs[0], result={"size": [640, 480]}) == (200, {"ok": True})
    assert app.result("j1", timeout_s=5) == {"size": [640, 480]}
    assert not r.hexists(keys.progress, "j1")  # its progress ended with it
    # the same done again (its reply lost): it succeeds, and nothing changes
    assert done(http, jobs[0]) == (200, {"ok": True})
    assert r.zcard(keys.leases) == 1  # j2 is still held
    assert done(http, jobs[1]) == (200, {"ok": True})
    # the claim's last job settled: its lease and held set are gone
    assert r.zcard(keys.leases) == 0 and not r.exists(keys.held(worker_id))
    rest = claim(http, n=10)
    assert [j["id"] for j in rest] == ["j3"]
    assert done(http, rest[0]) == (200, {"ok": True})
    assert claim(http, n=10) == []
    stats = app.stats(Q)
    assert stats["processed"] == 3 and stats.get("stale_acks", 0) == 0
    record = app.get_job("j2")
    assert record is not None and record.state == "done" and record.worker == worker_id


def test_a_failed_job_is_retried_by_its_policy_then_dead(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("flaky", [1], queue=Q, job_id="f1", retries=1)
    (job,) = claim(http)
    before = redis_ms(r)
    status, body = post(http, "/api/v1/jobs/f1/fail", {"token": job["token"], "error": "boom 1"})
    after = redis_ms(r)
    assert (status, body) == (200, {"ok": True, "outcome": "retry"})
    keys = app.keys(Q)
    due = r.zscore(keys.scheduled, "f1")  # the backoff: 0.5-1 s after its first failure
    assert due is not None and before + 500 <= due <= after + 1000
    info = app.get_job("f1")
    assert info is not None and info.state == "scheduled" and info.last_error == "boom 1"
    deadline = time.monotonic() + 10
    again: list[Any] = []
    while not again:  # a claim promotes it once due
        assert time.monotonic() < deadline, "the retry did not come"
        again = claim(http)
        time.sleep(0.05)
    assert again[0]["id"] == "f1" and again[0]["attempt"] == 2
    failure = {"token": again[0]["token"], "error": "boom 2", "traceback": "at line 7"}
    status, body = post(http, "/api/v1/jobs/f1/fail", failure)
    assert (status, body) == (200, {"ok": True, "outcome": "dead"})  # retries exhausted
    assert r.zscore(keys.dead, "f1") is not None
    info = app.get_job("f1")
    assert info is not None and info.state == "dead"
    assert (info.attempts, info.last_error, info.traceback) == (2, "boom 2", "at line 7")
    stats = app.stats(Q)
    assert (stats["retried"], stats["dead"], stats["failed"]) == (1, 1, 2)


def test_a_failure_with_retry_false_is_dead_at_once(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("charge", [9], queue=Q, job_id="c1")  # 5 retries by default
    (job,) = claim(http)
    failure = {"token": job["token"], "error": "card declined", "retry": False}
    status, body = post(http, "/api/v1/jobs/c1/fail", failure)
    assert (status, body) == (200, {"ok": True, "outcome": "dead"})
    dead = app.dead_jobs(Q)
    assert [(d.id, d.last_error, d.attempts) for d in dead] == [("c1", "card declined", 1)]
    assert app.stats(Q)["dead"] == 1 and r.zcard(app.keys(Q).leases) == 0
    # the same fail again (its reply lost) succeeds again; a done after it is refused
    assert post(http, "/api/v1/jobs/c1/fail", failure) == (200, {"ok": True, "outcome": "dead"})
    assert done(http, job)[0] == 409
    assert app.stats(Q)["dead"] == 1


def test_a_lapsed_lease_comes_back_through_the_reaper_and_its_late_done_is_refused(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("long", [1], queue=Q, job_id="L1")
    (first,) = claim(http, lease_s=1, worker="a")
    wait_past_deadline(app, r)  # worker a stops heartbeating
    Reaper(app, [Q], handle_signals=False).sweep(app.redis)  # one sweep, as `fastq reaper`
    keys = app.keys(Q)
    assert r.lrange(keys.ready, 0, -1) == [b"L1"] and r.hget(keys.stalls, "L1") == b"1"
    (second,) = claim(http, worker="b")  # it runs once more
    assert second["id"] == "L1" and second["token"] != first["token"]
    status, body = done(http, first)  # a's late done: refused, counted
    assert status == 409 and "lease lapsed" in body["error"]
    hb = post(http, "/api/v1/jobs/L1/heartbeat", {"token": first["token"]})
    assert hb[0] == 409
    assert app.stats(Q)["stale_acks"] == 1
    assert app.get_job("L1").state == "active"  # type: ignore[union-attr]  # b's, untouched
    assert done(http, second) == (200, {"ok": True})
    assert done(http, first)[0] == 409  # again: refused, counted once per job and claim
    stats = app.stats(Q)
    assert (stats["processed"], stats["stale_acks"]) == (1, 1)


def test_a_done_after_the_deadline_is_refused_before_any_reaper(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("long", [1], queue=Q, job_id="L2")
    (job,) = claim(http, lease_s=1)
    wait_past_deadline(app, r)
    status, _ = done(http, job, result="too late")
    assert status == 409
    keys = app.keys(Q)
    # handed back as a reaper would, the stall counted, the result not kept
    assert r.lrange(keys.ready, 0, -1) == [b"L2"] and r.hget(keys.stalls, "L2") == b"1"
    assert not r.exists(keys.result("L2"))
    stats = app.stats(Q)
    assert (stats.get("processed", 0), stats["stale_acks"]) == (0, 1)


def test_heartbeats_keep_a_lease_past_its_length(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("long", [1], queue=Q, job_id="H1")
    (job,) = claim(http, lease_s=2)
    reaper = Reaper(app, [Q], handle_signals=False)
    until = time.monotonic() + 4.5  # over two leases; a beat every 0.2 s of each 2 s
    while time.monotonic() < until:
        assert post(http, "/api/v1/jobs/H1/heartbeat", {"token": job["token"]})[0] == 200
        reaper.sweep(app.redis)
        time.sleep(0.2)
    assert done(http, job) == (200, {"ok": True})
    assert app.stats(Q).get("stale_acks", 0) == 0 and r.hget(app.keys(Q).stalls, "H1") is None


def test_two_http_workers_never_get_the_same_job(app: fastq.App, served: ServedWorkers) -> None:
    app.enqueue_many("n", [[i] for i in range(300)], queue=Q)
    got: dict[str, list[str]] = {"a": [], "b": []}
    both_claimed = threading.Barrier(2, timeout=30)  # both hold jobs before either goes on

    def work(name: str) -> None:
        with served.client() as http:
            first = True
            while True:
                jobs = claim(http, n=7, worker=name)
                if first:
                    both_claimed.wait()
                    first = False
                if not jobs:
                    return
                for job in jobs:
                    assert done(http, job) == (200, {"ok": True})
                    got[name].append(job["id"])

    threads = [threading.Thread(target=work, args=(name,)) for name in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got["a"] and got["b"] and not set(got["a"]) & set(got["b"])
    assert len(got["a"]) + len(got["b"]) == 300
    assert app.stats(Q)["processed"] == 300


def test_a_sharded_queue_is_claimed_across_its_shards(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.declare_queue("sq", shards=3)
    ids = app.enqueue_many("n", [[i] for i in range(9)], queue="sq")
    status, body = post(http, "/api/v1/queues/sq/claim", {"max": 9})
    assert status == 200 and sorted(j["id"] for j in body["jobs"]) == sorted(ids)
    assert {j["token"].split(":")[0] for j in body["jobs"]} == {"sq", "sq#1", "sq#2"}
    for job in body["jobs"]:
        assert done(http, job) == (200, {"ok": True})
    assert app.stats("sq")["processed"] == 9


def test_an_unreadable_envelope_is_quarantined_not_handed_out(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    keys = app.keys(Q)
    r.hset(keys.jobs, "bad", b"not json")
    r.rpush(keys.ready, "bad")
    app.enqueue("ok", [], queue=Q, job_id="good")
    jobs = claim(http, n=5)
    assert [j["id"] for j in jobs] == ["good"]
    assert r.hget(keys.broken, "bad").startswith(b"invalid JSON")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (f"/api/v1/queues/{Q}/claim", {"max": 0}, "max must be within 1..1000, not 0"),
        (f"/api/v1/queues/{Q}/claim", {"max": 1001}, "max must be within 1..1000"),
        (f"/api/v1/queues/{Q}/claim", {"max": "3"}, "max must be an integer, not str"),
        (f"/api/v1/queues/{Q}/claim", {"lease_s": 0.5}, "lease_s must be within 1..86400"),
        (f"/api/v1/queues/{Q}/claim", {"lease_s": True}, "lease_s must be a number"),
        (f"/api/v1/queues/{Q}/claim", {"worker": "a b"}, "worker must be 1 to 64"),
        (f"/api/v1/queues/{Q}/claim", [1], "the body must be a JSON object"),
        ("/api/v1/queues/a%23b/claim", {}, "'#' is reserved for the shards"),
        ("/api/v1/jobs/x/heartbeat", {}, "token must be a string, not null"),
        ("/api/v1/jobs/x/heartbeat", {"token": "guess"}, "token is not one a claim returned"),
        ("/api/v1/jobs/x/done", {"token": 7}, "token must be a string, not int"),
        ("/api/v1/jobs/a%20b/done", {"token": "t"}, "invalid job_id 'a b'"),
        ("/api/v1/jobs/x/fail", {"token": SHAPED}, "error must be a non-empty string, not null"),
        (
            "/api/v1/jobs/x/fail",
            {"token": SHAPED, "error": "e", "retry": "no"},
            "retry must be true",
        ),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    http: httpx.Client, path: str, body: Any, message: str
) -> None:
    status, reply = post(http, path, body)
    # a body that is no JSON object is the request's fault (400), a value the field's
    assert status == (400 if isinstance(body, list) else 422) and message in reply["error"], reply


def test_bad_bodies_are_a_400_and_bad_values_a_422(app: fastq.App, http: httpx.Client) -> None:
    response = http.post(
        f"/api/v1/queues/{Q}/claim", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and "the body is not valid JSON" in response.json()["error"]
    response = http.post(
        f"/api/v1/queues/{Q}/claim", content=b" ", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400  # blank is not JSON; no body at all is {}
    app.enqueue("p", [], queue=Q, job_id="p1")
    (job,) = claim(http)
    token = job["token"]
    for progress, message in [
        (2, "fraction must be a finite number in [0, 1]"),
        ({"fraction": 0.1, "x": 1}, "progress must be a number in [0, 1]"),
        ("half", "fraction must be a number in [0, 1]"),
    ]:
        status, reply = post(
            http, "/api/v1/jobs/p1/heartbeat", {"token": token, "progress": progress}
        )
        assert status == 422 and message in reply["error"], reply
    status, reply = post(
        http, "/api/v1/jobs/p1/done", {"token": token, "result": 1, "result_ttl_s": -1}
    )
    assert status == 422 and "result_ttl_s must be" in reply["error"]
    # a token of another claim (the secret changed): the lease is not its
    forged = token[:-1] + ("0" if token[-1] != "0" else "1")
    assert post(http, "/api/v1/jobs/p1/done", {"token": forged})[0] == 409
    assert done(http, job) == (200, {"ok": True})


def test_a_redis_that_is_gone_is_a_503_not_a_500(namespace: str) -> None:
    server = RedisServer().start()
    app = fastq.App(server.url, namespace=namespace)
    app.declare_queue(Q)
    app.enqueue("x", [], queue=Q, job_id="x1")
    served = ServedWorkers(app).start()
    try:
        with served.client() as http:
            (job,) = claim(http)
            server.kill()
            for path, body in [
                (f"/api/v1/queues/{Q}/claim", {}),
                ("/api/v1/jobs/x1/heartbeat", {"token": job["token"]}),
                ("/api/v1/jobs/x1/done", {"token": job["token"]}),
                ("/api/v1/jobs/x1/fail", {"token": job["token"], "error": "e"}),
            ]:
                status, reply = post(http, path, body)
                assert status == 503 and "Redis could not serve the call" in reply["error"]
    finally:
        served.stop()
        app.close()
        server.cleanup()


def test_a_failure_past_the_age_limit_is_dead_saying_so(app: fastq.App, http: httpx.Client) -> None:
    app.enqueue("old", [], queue=Q, job_id="a1", age_limit_s=0.01)  # its retry would start later
    (job,) = claim(http)
    status, body = post(http, "/api/v1/jobs/a1/fail", {"token": job["token"], "error": "slow"})
    assert (status, body) == (200, {"ok": True, "outcome": "dead"})
    info = app.get_job("a1")
    assert info is not None and info.state == "dead" and info.last_error is not None
    assert info.last_error.startswith("age limit: first enqueued")
    assert info.last_error.endswith("not retried; last error: slow")


def test_a_failure_follows_the_servers_registered_job_policy(
    app: fastq.App, http: httpx.Client
) -> None:
    @app.job(queue=Q, retries=0)
    def strict() -> None:
        """Run by HTTP workers; the server's app only says its policy."""

    app.enqueue("strict", [], queue=Q, job_id="s1")
    (job,) = claim(http)
    status, body = post(http, "/api/v1/jobs/s1/fail", {"token": job["token"], "error": "no"})
    assert (status, body) == (200, {"ok": True, "outcome": "dead"})  # no retry left
    app.enqueue("strict", [], queue=Q, job_id="s2", retries=1)  # the enqueue's own wins
    (job,) = claim(http)
    status, body = post(http, "/api/v1/jobs/s2/fail", {"token": job["token"], "error": "no"})
    assert (status, body) == (200, {"ok": True, "outcome": "retry"})


def test_an_http_workers_done_carries_a_chain_on_at_once(
    app: fastq.App, http: httpx.Client
) -> None:
    """The ack of a link done over HTTP enqueues the next link with it (no reaper)."""

    @app.job(queue=Q)
    def hop(i: int) -> None: ...

    chain_id = app.chain(hop.step(1), hop.step(2))
    (first,) = claim(http)
    assert first["id"] == chain_id
    assert done(http, first)[0] == 200
    (second,) = claim(http)
    assert (second["id"], second["args"]) == (f"{chain_id}.2", [2])
    assert done(http, second)[0] == 200
    status = app.chain_status(chain_id)
    assert status is not None and status.state == "done"


def test_a_batch_done_by_http_workers_ends_and_calls_back_at_once(
    app: fastq.App, http: httpx.Client
) -> None:
    """The ack of a batch's last job over HTTP settles the batch and queues its
    callback, as a pool child's does, with no reaper running."""

    @app.job(queue=Q)
    def send(i: int) -> None: ...

    @app.job(queue=Q)
    def blast_over(status: dict[str, Any]) -> None: ...

    with app.batch(on_complete=blast_over, id="blast") as batch:
        for i in range(4):
            send.enqueue(i)
    assert batch.id == "blast"
    jobs = claim(http, n=4)
    assert len(jobs) == 4
    for job in jobs[:3]:
        assert done(http, job)[0] == 200
    status = app.batch_status("blast")
    assert status is not None and (status.state, status.done) == ("closed", 3)
    failure = {"token": jobs[3]["token"], "error": "mailbox full", "retry": False}
    assert post(http, f"/api/v1/jobs/{jobs[3]['id']}/fail", failure)[0] == 200
    # at once: the reply to the last ack is the batch's end, and its callback's enqueue
    status = app.batch_status("blast")
    assert status is not None
    assert (status.state, status.total, status.done, status.dead) == ("ended", 4, 3, 1)
    (callback,) = claim(http)
    assert (callback["id"], callback["name"]) == ("blast.complete", "blast_over")
    assert callback["args"][0]["dead"] == 1
