"""HTTP workers at speed (``fastq serve``'s batched ack and long-poll claim), on a
real redis-server and a real uvicorn: many jobs done and failed in one request, each
answered on its own; a claim that waits for jobs, woken by an enqueue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

import fastq
from tests.support.http import ServedWorkers, post

Q = "aq"
ACK = f"/api/v1/queues/{Q}/ack"


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


def claim(http: httpx.Client, n: int = 1, lease_s: float = 30, **more: Any) -> list[Any]:
    body = {"max": n, "lease_s": lease_s, "worker": "w", **more}
    status, reply = post(http, f"/api/v1/queues/{Q}/claim", body)
    assert status == 200, reply
    jobs: list[Any] = reply["jobs"]
    return jobs


def by_id(jobs: list[Any]) -> dict[str, Any]:
    return {job["id"]: job for job in jobs}


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def evalsha_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def test_a_batched_ack_settles_done_and_fail_in_one_request(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("a", [1], queue=Q, job_id="d1")
    app.enqueue("a", [2], queue=Q, job_id="d2")
    app.enqueue("a", [3], queue=Q, job_id="f-retry")  # 5 retries by default
    app.enqueue("a", [4], queue=Q, job_id="f-no")
    app.enqueue("a", [5], queue=Q, job_id="f-spent", retries=0)
    jobs = by_id(claim(http, n=5))
    assert sorted(jobs) == ["d1", "d2", "f-no", "f-retry", "f-spent"]
    token = jobs["d1"]["token"]  # one claim: one token for all
    before = evalsha_calls(r)
    status, body = post(
        http,
        ACK,
        {
            "done": [{"id": "d1", "token": token}, {"id": "d2", "token": token, "result": [7]}],
            "fail": [
                {"id": "f-retry", "token": token, "error": "flaky"},
                {"id": "f-no", "token": token, "error": "declined", "retry": False},
                {"id": "f-spent", "token": token, "error": "again"},
            ],
        },
    )
    assert status == 200, body
    assert body == {
        "applied": 5,
        "done": [{"id": "d1", "ok": True}, {"id": "d2", "ok": True}],
        "fail": [
            {"id": "f-retry", "ok": True, "outcome": "retry"},
            {"id": "f-no", "ok": True, "outcome": "dead"},
            {"id": "f-spent", "ok": True, "outcome": "dead"},
        ],
    }
    # scripts: the take-back of a lapsed lease, the one ack, and the claim's lease
    # dropped once all its jobs are settled
    assert evalsha_calls(r) - before == 3
    keys = app.keys(Q)
    assert r.zrange(keys.scheduled, 0, -1) == [b"f-retry"]
    assert sorted(r.zrange(keys.dead, 0, -1)) == [b"f-no", b"f-spent"]
    assert r.zcard(keys.leases) == 0  # the claim's lease dropped with its last job
    # the done jobs are gone; a retried or dead one keeps its envelope
    assert sorted(r.hkeys(keys.jobs)) == [b"f-no", b"f-retry", b"f-spent"]
    assert app.result("d2", timeout_s=1) == [7]
    dead = {d.id: (d.last_error, d.attempts) for d in app.dead_jobs(Q)}
    assert dead == {"f-no": ("declined", 1), "f-spent": ("again", 1)}
    stats = app.stats(Q)
    assert (stats["processed"], stats["failed"], stats["retried"], stats["dead"]) == (2, 3, 1, 2)


def test_a_stale_token_in_a_batch_is_refused_while_the_others_apply(
    app: fastq.App, r: redis.Redis, http: httpx.Client
) -> None:
    app.enqueue("a", [1], queue=Q, job_id="mine")
    (mine,) = claim(http)
    app.enqueue("a", [2], queue=Q, job_id="theirs")
    (theirs,) = claim(http)  # another claim's
    app.enqueue("a", [3], queue=Q, job_id="lapsed")
    (lapsed,) = claim(http, lease_s=1)
    leases = app.keys(Q).leases
    # the earliest deadline: the 1 s lease (the others are 30 s)
    lapses_at = min(score for _, score in r.zrange(leases, 0, -1, withscores=True))
    deadline = time.monotonic() + 10
    while redis_ms(r) <= int(lapses_at):  # past the 1 s lease, by Redis' clock
        assert time.monotonic() < deadline, "the lease did not lapse"
        time.sleep(0.05)
    token = mine["token"]
    status, body = post(
        http,
        ACK,
        {
            "done": [
                {"id": "mine", "token": token},
                {"id": "theirs", "token": token},  # not this claim's job
                {"id": "nobody", "token": token},  # no such job
                {"id": "lapsed", "token": lapsed["token"]},
            ]
        },
    )
    assert status == 200, body
    answers = {a["id"]: (a["ok"], a.get("error")) for a in body["done"]}
    assert body["applied"] == 1 and body["fail"] == []
    assert answers == {
        "mine": (True, None),
        "theirs": (False, "lease_gone"),
        "nobody": (False, "unknown_job"),
        "lapsed": (False, "lease_gone"),
    }
    keys = app.keys(Q)
    assert not r.hexists(keys.jobs, "mine")
    assert r.hexists(keys.jobs, "theirs") and r.zcard(keys.leases) == 1  # theirs holds on
    assert r.lrange(keys.ready, 0, -1) == [b"lapsed"]  # handed back by the late ack
    assert app.stats(Q)["processed"] == 1
    # the same ack again: the done job is answered done again, nothing changes
    again = post(http, ACK, {"done": [{"id": "mine", "token": token}]})
    assert again == (200, {"applied": 1, "done": [{"id": "mine", "ok": True}], "fail": []})
    assert app.stats(Q)["processed"] == 1
    assert theirs["token"] != token


def test_a_batched_ack_that_ends_a_batch_calls_back_with_no_reaper(
    app: fastq.App, http: httpx.Client
) -> None:
    @app.job(queue=Q)
    def send(i: int) -> None: ...

    @app.job(queue=Q)
    def blast_over(status: dict[str, Any]) -> None: ...

    with app.batch(on_complete=blast_over, id="blast"):
        for i in range(5):
            send.enqueue(i)
    jobs = claim(http, n=5)
    token = jobs[0]["token"]
    entries = [{"id": job["id"], "token": token} for job in jobs]
    failure = {**entries[4], "error": "bounced", "retry": False}
    status, body = post(http, ACK, {"done": entries[:4], "fail": [failure]})
    assert (status, body["applied"]) == (200, 5)
    status_now = app.batch_status("blast")
    assert status_now is not None
    assert (status_now.state, status_now.done, status_now.dead) == ("ended", 4, 1)
    (callback,) = claim(http)
    assert (callback["id"], callback["name"]) == ("blast.complete", "blast_over")


@pytest.mark.parametrize(
    "body, status, error",
    [
        ([], 400, "an ack: the body must be a JSON object, not an array"),
        ({}, 422, "an ack must settle at least one job"),
        ({"dones": []}, 422, "an ack has unknown fields: dones"),
        ({"done": {}}, 422, "done must be an array, not an object"),
        ({"done": [7]}, 422, "done[0] must be an object, not int"),
        ({"done": [{"token": "x"}]}, 422, "done[0].id must be a string, not null"),
        ({"done": [{"id": "j", "token": "x"}]}, 422, "done[0]: token is not one a claim"),
        ({"done": [{"id": "j", "token": "T", "res": 1}]}, 422, "done[0] has unknown fields: res"),
        ({"fail": [{"id": "j", "token": "T"}]}, 422, "fail[0]: error must be a non-empty"),
        ({"fail": [{"id": "j", "token": "T", "error": "e", "retry": 1}]}, 422, "fail[0]: retry"),
        ({"done": [{"id": "j", "token": "T"}] * 2}, 422, "job j is settled twice in one ack"),
        ({"done": [{"id": "j", "token": "O"}]}, 422, "done[0].token is a claim of another"),
        (
            {"done": [{"id": str(i), "token": "T"} for i in range(1001)]},
            422,
            "an ack settles at most 1000",
        ),
    ],
)
def test_a_malformed_ack_is_refused_whole_and_applies_nothing(
    app: fastq.App, http: httpx.Client, body: Any, status: int, error: str
) -> None:
    app.enqueue("a", [1], queue=Q, job_id="j")
    (job,) = claim(http)
    tokens = {"T": job["token"], "O": f"other:1000:w:{'0' * 32}"}
    got_status, reply = post(http, ACK, with_tokens(body, tokens))
    assert got_status == status and reply["error"].startswith(error), reply
    assert app.keys(Q) and app.stats(Q)["processed"] == 0
    assert post(http, ACK, {"done": [{"id": "j", "token": job["token"]}]})[0] == 200


def with_tokens(value: Any, tokens: dict[str, str]) -> Any:
    """``value`` with each ``"token"`` named in ``tokens`` (T: the claim's, O: a
    claim of another queue's) replaced by that token."""
    if isinstance(value, list):
        return [with_tokens(v, tokens) for v in value]
    if isinstance(value, dict):
        return {
            k: tokens.get(v, v) if k == "token" else with_tokens(v, tokens)
            for k, v in value.items()
        }
    return value


def blocked_clients(r: redis.Redis) -> int:
    return int(r.info("clients")["blocked_clients"])


def test_a_long_poll_claim_is_woken_by_an_enqueue(
    app: fastq.App, r: redis.Redis, served: ServedWorkers
) -> None:
    got: list[Any] = []

    def wait_for_jobs() -> None:
        with served.client() as client:
            started = time.monotonic()
            got.extend(claim(client, n=10, wait_s=20))
            got.append(time.monotonic() - started)

    waiter = threading.Thread(target=wait_for_jobs)
    waiter.start()
    deadline = time.monotonic() + 10
    while blocked_clients(r) == 0:  # the claim is waiting on the queue's wake key
        assert time.monotonic() < deadline, "the claim did not wait"
        time.sleep(0.02)
    app.enqueue("a", [1], queue=Q, job_id="late")
    waiter.join(30)
    assert not waiter.is_alive()
    jobs, elapsed = got[:-1], got[-1]
    assert [job["id"] for job in jobs] == ["late"]
    assert elapsed < 10  # woken, well before its 20 s


def test_a_long_poll_on_an_empty_queue_answers_none_after_wait_s(http: httpx.Client) -> None:
    started = time.monotonic()
    assert claim(http, wait_s=1.5) == []
    assert time.monotonic() - started >= 1.5


def test_a_claim_without_wait_s_answers_at_once(http: httpx.Client) -> None:
    started = time.monotonic()
    assert claim(http) == []
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "wait_s, error",
    [
        (-1, "wait_s must be within 0..30 seconds, not -1"),
        (30.5, "wait_s must be within 0..30 seconds, not 30.5"),
        ("5", "wait_s must be a number of seconds, not str"),
        (True, "wait_s must be a number of seconds, not bool"),
    ],
)
def test_a_wrong_wait_s_is_a_422(http: httpx.Client, wait_s: Any, error: str) -> None:
    assert post(http, f"/api/v1/queues/{Q}/claim", {"wait_s": wait_s}) == (422, {"error": error})


def test_a_long_poll_whose_client_went_away_takes_no_job(
    app: fastq.App, r: redis.Redis, served: ServedWorkers
) -> None:
    with served.client() as client, pytest.raises(httpx.ReadTimeout):
        client.post(f"/api/v1/queues/{Q}/claim", json={"wait_s": 20}, timeout=0.5)
    app.enqueue("a", [1], queue=Q, job_id="kept")
    deadline = time.monotonic() + 10
    while blocked_clients(r) > 0:  # the server saw its client go and stopped waiting
        assert time.monotonic() < deadline, "the abandoned claim is still waiting"
        time.sleep(0.02)
    keys = app.keys(Q)
    assert r.zcard(keys.leases) == 0 and r.lrange(keys.ready, 0, -1) == [b"kept"]
    with served.client() as client:
        (job,) = claim(client)
    assert (job["id"], job["attempt"]) == ("kept", 1)
