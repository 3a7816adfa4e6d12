"""The dashboard's Limits page over HTTP, as a browser's form posts it: a key given a
rate of its own is listed and lifted, bad input is said on the page and writes
nothing, and an open circuit breaker shows with its time left."""

from __future__ import annotations

import re
from typing import Callable

import httpx
import pytest
import redis

import fastq
from tests.support.serve import TOKEN, Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def browser(server: Server) -> httpx.Client:
    # the bearer token opens the pages as a session ("bearer"), with its CSRF token
    return httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/html"},
        timeout=30,
    )


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


def test_a_keys_rate_is_set_shown_and_lifted_from_the_page(
    start: Callable[..., Server], app: fastq.App, r: redis.Redis
) -> None:
    server = start()
    with browser(server) as client:
        page = client.get("/limits")
        assert page.status_code == 200 and 'id="no-key-rates"' in page.text
        csrf = csrf_of(page.text)
        form = {
            "csrf": csrf,
            "back": "/limits",
            "key": "dom:slow.example",
            "rate": "20/s",
            "burst": "2",
        }
        reply = client.post("/actions/key-rate", data=form)
        assert reply.status_code == 303
        shown = client.get(reply.headers["location"])
        assert "dom:slow.example: at most 20/s (burst 2), across every worker" in shown.text
        assert 'data-key="dom:slow.example"' in shown.text
        assert app.key_rate_limits() == {"dom:slow.example": fastq.validate.RateLimit(20, 1000, 2)}
        # bad input: said on the page, nothing written
        for bad in ({"rate": "fast"}, {"rate": "20/s", "burst": "x"}, {"key": ""}):
            reply = client.post("/actions/key-rate", data={**form, **bad})
            assert reply.status_code == 303
            said = client.get(reply.headers["location"]).text
            assert "not set" in said
        assert app.key_rate_limits() == {"dom:slow.example": fastq.validate.RateLimit(20, 1000, 2)}
        reply = client.post(
            "/actions/key-rate", data={"csrf": csrf, "key": "dom:slow.example", "rate": "off"}
        )
        assert reply.status_code == 303
        assert app.key_rate_limits() == {}
        assert 'id="no-key-rates"' in client.get("/limits").text


def test_an_open_circuit_shows_with_its_time_left(
    start: Callable[..., Server], app: fastq.App
) -> None:
    @app.job(queue="mail", circuit_key="smtp:{host}", circuit_failures=1, circuit_open_s=60)
    def send(host: str) -> None:
        raise ConnectionRefusedError(host)

    from tests.support.workers import drain

    app.enqueue("send", ("mx.example",), queue="mail")
    drain(app, ["mail"], burst_horizon_s=0)
    server = start()
    with browser(server) as client:
        page = client.get("/limits").text
    row = page[page.index('data-circuit="smtp:mx.example"') :]
    row = row[: row.index("</tr>")]
    assert ">open<" in row and " s</td>" in row


def test_a_queues_groups_are_shown_and_paused_from_its_page(
    start: Callable[..., Server], app: fastq.App
) -> None:
    @app.job(queue="mail", group="t-{tenant}")
    def send(tenant: str, i: int) -> None:
        pass

    send.enqueue_many([("a", i) for i in range(3)])
    send.enqueue_many([("b", i) for i in range(2)])
    server = start()
    with browser(server) as client:
        page = client.get("/queues/mail")
        assert 'data-group="t-a"' in page.text and 'data-group="t-b"' in page.text
        form = {"csrf": csrf_of(page.text), "back": "/queues/mail", "group": "t-a"}
        reply = client.post("/queues/mail/pause-group", data=form)
        assert reply.status_code == 303
        shown = client.get(reply.headers["location"]).text
        assert "paused group t-a of mail: its jobs wait" in shown
        row = shown[shown.index('data-group="t-a"') :]
        assert ">paused<" in row[: row.index("</tr>")] and ">Resume<" in row[: row.index("</tr>")]
        assert app.paused_groups("mail") == ["t-a"]
        reply = client.post("/queues/mail/resume-group", data=form)
        assert app.paused_groups("mail") == []
        bad = client.post("/queues/mail/pause-group", data={**form, "group": "a\tb"})
        assert "group not paused" in client.get(bad.headers["location"]).text
