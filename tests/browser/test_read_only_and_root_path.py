"""The dashboard read-only (--read-only: no action shown, every one refused),
behind a reverse proxy's path prefix (--root-path: every link and asset under it,
the API still guarded), and with no token on loopback (no login, actions still
carry their CSRF token, and only requests to localhost are taken)."""

from __future__ import annotations

from typing import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

import fastq
from tests.support.dashboard import PrefixProxy, log_in, screenshot
from tests.support.serve import TOKEN, Server

pytestmark = pytest.mark.timeout(60)

# every URL the page itself names: links, forms, scripts, styles, htmx polls, charts
URLS_OF_PAGE = """() => Array.from(document.querySelectorAll(
    '[href], [src], [action], [hx-get], [data-history]')).map(e =>
    e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action')
    || e.getAttribute('hx-get') || e.getAttribute('data-history'))"""


def test_read_only_shows_no_action_and_refuses_every_one(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.enqueue("ok", args=[1], queue="dash")
    server = serve("--read-only")
    log_in(page, server, "/queues/dash")
    expect(page.locator("#read-only")).to_have_text("read-only")
    expect(page.locator("#jobs tbody tr[data-job]")).to_have_count(1)
    for action in ("#pause", "#resume", "#set-rate", "#purge"):
        expect(page.locator(action)).to_have_count(0)
    page.locator("#jobs a").first.click()
    expect(page.locator("#state")).to_have_text("queued")
    expect(page.locator("#cancel")).to_have_count(0)
    screenshot(page, "read-only-job")
    for path in ("/queues/dash/pause", "/queues/dash/purge", "/actions/cancel"):
        refused = page.request.post(server.base_url + path, form={"ready": "1"})
        assert refused.status == 403, path
        assert "read-only" in refused.text()
    assert app.stats("dash")["paused"] == 0 and app.stats("dash")["ready"] == 1


@pytest.fixture
def proxy() -> Iterator[Callable[[Server], PrefixProxy]]:
    proxies: list[PrefixProxy] = []

    def start(server: Server) -> PrefixProxy:
        proxies.append(PrefixProxy(server.base_url, "/fastq"))
        return proxies[-1]

    yield start
    for p in proxies:
        p.close()


def test_behind_a_proxys_path_prefix_every_url_is_under_it(
    page: Page,
    serve: Callable[..., Server],
    proxy: Callable[[Server], PrefixProxy],
    app: fastq.App,
) -> None:
    app.enqueue("ok", args=[1], queue="dash")
    server = serve("--root-path", "/fastq")
    front = proxy(server)
    page.goto(front.base_url + "/")
    assert page.url == front.base_url + "/login?next=%2F"
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_url(front.base_url + "/")
    cookie = next(c for c in page.context.cookies() if c["name"] == "fastq_session")
    assert cookie["path"] == "/fastq/"
    # the scripts came through the prefix: htmx polls, uPlot drew the chart
    expect(page.locator(".plot[data-drawn]")).to_have_attribute("data-drawn", "360")
    for url in page.evaluate(URLS_OF_PAGE):
        assert url.startswith("/fastq/"), url
    page.click('#queues a[href="/fastq/queues/dash"]')
    page.click("#pause")
    expect(page.locator("#flash")).to_contain_text("paused dash")
    assert page.url.startswith(front.base_url + "/queues/dash")
    assert app.stats("dash")["paused"] == 1
    for url in page.evaluate(URLS_OF_PAGE):
        assert url.startswith("/fastq/"), url
    screenshot(page, "root-path-queue")
    # the API is guarded under the prefix as at /
    with httpx.Client(timeout=10) as anon:
        assert anon.get(front.base_url + "/api/v1/queues").status_code == 401
        assert anon.get(server.base_url + "/api/v1/queues").status_code == 401
    with server.client() as api:
        assert api.get("/api/v1/queues/dash").json()["stats"]["paused"] == 1


def test_without_a_token_loopback_needs_no_login_and_others_are_refused(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.enqueue("ok", args=[1], queue="dash")
    server = serve(token=None)
    page.goto(server.base_url + "/queues/dash")
    expect(page.locator("#pause")).to_be_visible()
    expect(page.locator(".logout")).to_have_count(0)
    page.click("#pause")
    expect(page.locator("#flash")).to_contain_text("paused dash")
    assert app.stats("dash")["paused"] == 1
    refused = page.request.post(server.base_url + "/queues/dash/resume", form={})
    assert refused.status == 403 and "CSRF" in refused.text()
    with httpx.Client(base_url=server.base_url, timeout=10) as other:
        # a page reached through another name (a DNS name rebound to 127.0.0.1)
        reply = other.get("/", headers={"Host": "attacker.example"})
        assert reply.status_code == 403
        assert "answers only requests to localhost" in reply.text
