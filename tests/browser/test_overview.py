"""The dashboard's overview and its door: what a person sees after logging in
(every queue's counts, equal to app.stats()), kept live without a reload; the
login form, a wrong token, pages and actions without a session or a CSRF token."""

from __future__ import annotations

from typing import Callable

import httpx
import pytest
import redis
from playwright.sync_api import Page, expect

import fastq
from fastq.protocol.history import SLOT_MS, SLOTS, history_key
from tests.support.dashboard import DashPool, log_in, screenshot
from tests.support.pool import wait_until
from tests.support.serve import TOKEN, Server

pytestmark = pytest.mark.timeout(60)

SHOWN = ("ready", "scheduled", "inflight", "dead", "broken")


def _row(page: Page, queue: str, count: str) -> str:
    return page.locator(f'#queues tr[data-queue="{queue}"] td[data-count="{count}"]').inner_text()


def test_the_overview_shows_what_stats_says_and_follows_it(
    page: Page, serve: Callable[..., Server], app: fastq.App, r: redis.Redis
) -> None:
    app.enqueue("ok", args=[1], queue="dash")
    # the hour's history as the pool's ack script writes it: two slots of dash's
    seconds, _ = r.time()
    last = int(seconds) * 1000 // SLOT_MS * SLOT_MS
    for slot_ms, done, failed in ((last - 2 * SLOT_MS, 40, 2), (last - 300 * SLOT_MS, 25, 1)):
        r.hset(
            history_key(app.keys("dash")),
            str(slot_ms // SLOT_MS % SLOTS),
            f"{slot_ms}:{done}:{failed}",
        )
    app.enqueue("ok", args=[2], queue="dash")
    app.enqueue("ok", args=[3], queue="dash", delay_s=600)
    app.enqueue("ok", args=[4], queue="other")
    app.pause("other")
    server = serve()
    log_in(page, server)
    for queue in ("dash", "other"):
        stats = app.stats(queue)
        for count in SHOWN:
            assert _row(page, queue, count) == str(stats[count]), (queue, count)
    assert _row(page, "dash", "paused") == "running"
    assert _row(page, "other", "paused") == "paused"
    assert _row(page, "dash", "workers") == "0"
    assert (_row(page, "dash", "done_hour"), _row(page, "dash", "failed_hour")) == ("65", "3")
    assert _row(page, "dash", "per_s") == "0.7"  # 40 jobs in the last minute's slots
    assert (_row(page, "other", "done_hour"), _row(page, "other", "failed_hour")) == ("0", "0")
    # the chart of the last hour: 360 slots of 10 s, every queue's summed
    expect(page.locator(".plot[data-drawn]")).to_have_attribute("data-drawn", "360")
    series = page.request.get(server.base_url + "/_/history").json()
    assert (sum(series["processed"]), sum(series["failed"])) == (65, 3)
    screenshot(page, "overview")
    # live: a job enqueued now shows within a poll, with no reload
    app.enqueue("ok", args=[5], queue="dash")
    cell = page.locator('#queues tr[data-queue="dash"] td[data-count="ready"]')
    expect(cell).to_have_text(str(app.stats("dash")["ready"]))
    assert app.stats("dash")["ready"] == 3


def test_the_overview_counts_a_pools_workers_and_jobs_done(
    page: Page, serve: Callable[..., Server], pool: Callable[..., DashPool], app: fastq.App
) -> None:
    server = serve()
    started = pool("-c", "2", "-q", "dash")
    started.wait_children(2)
    for i in range(10):
        app.enqueue("ok", args=[i], queue="dash")
    log_in(page, server)
    expect(page.locator('#queues tr[data-queue="dash"] td[data-count="workers"]')).to_have_text("2")
    # the pool drains meanwhile; once it has, the page follows without a reload
    wait_until(lambda: app.stats("dash")["processed"] == 10, 20, "the pool to run the jobs")
    stats = app.stats("dash")
    for count in SHOWN:
        cell = page.locator(f'#queues tr[data-queue="dash"] td[data-count="{count}"]')
        expect(cell).to_have_text(str(stats[count]))


def test_login_takes_the_token_and_refuses_another(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.declare_queue("dash")
    server = serve()
    page.goto(server.base_url + "/")
    assert page.url.startswith(server.base_url + "/login")  # sent to the form
    page.fill("#token", "not-the-token-at-all")
    page.click("#login")
    expect(page.locator("#login-error")).to_have_text("Wrong token.")
    screenshot(page, "login-refused")
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_url(server.base_url + "/")
    expect(page.locator('#queues tr[data-queue="dash"]')).to_have_count(1)
    cookie = next(c for c in page.context.cookies() if c["name"] == "fastq_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"] and TOKEN not in page.content()
    page.click(".logout button")
    page.wait_for_url(server.base_url + "/login")
    page.goto(server.base_url + "/")
    assert page.url.startswith(server.base_url + "/login")


def test_pages_are_refused_without_a_session(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.declare_queue("dash")
    server = serve()
    with httpx.Client(base_url=server.base_url, timeout=10) as anon:
        for path, there in (("/", "%2F"), ("/_/queues", "%2F_%2Fqueues")):
            reply = anon.get(path)
            assert reply.status_code == 303, path
            assert reply.headers["location"] == f"/login?next={there}"
        # a script's request (htmx polling) after its session lapsed: 401, not a redirect
        assert anon.get("/_/history", headers={"HX-Request": "true"}).status_code == 401
        wrong = {"Authorization": "Bearer wrong-token-0123456789"}
        assert anon.get("/", headers=wrong).status_code == 401
    with httpx.Client(base_url=server.base_url, timeout=10) as forged:
        forged.cookies.set("fastq_session", "forged.0123abcd")
        assert forged.get("/").status_code == 303
    with server.client() as bearer:  # the API's header opens the pages too
        reply = bearer.get("/")
        assert reply.status_code == 200 and 'data-queue="dash"' in reply.text
        assert bearer.get("/_/history?window_s=60").json()["processed"] == [0] * 6


def test_a_page_whose_session_ends_goes_to_the_login_form_by_itself(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.declare_queue("dash")
    server = serve()
    log_in(page, server, "/queues/dash?state=dead")
    page.context.clear_cookies()  # the session ends (logged out elsewhere, token changed)
    # the next poll is refused: the page goes to the form, and back after it
    page.wait_for_url(server.base_url + "/login?next=%2Fqueues%2Fdash%3Fstate%3Ddead")
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_url(server.base_url + "/queues/dash?state=dead")
    expect(page.locator("#tab-dead")).to_have_class("here")
