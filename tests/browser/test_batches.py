"""The batch pages, as a person uses them: a batch found on the Batches page with
its progress, its page's counts, closed, then cancelled after a confirm step; a
batch that runs to its end followed live; one cancelled while a job of it runs,
``cancelled`` until that job ends; read-only: no button, every action refused."""

from __future__ import annotations

from typing import Callable

import pytest
import redis
from playwright.sync_api import Page, expect

import fastq
from tests.support.dashboard import DashPool, log_in, screenshot
from tests.support.pool import wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(60)


def count(page: Page, name: str) -> str:
    return page.locator(f'#counts td[data-count="{name}"]').inner_text()


def test_a_batch_is_found_closed_and_cancelled_from_its_page(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    # no worker runs: the jobs wait
    with app.batch(description="november mailing", close=False) as batch:
        app.enqueue_many("ok", [(i,) for i in range(20)], queue="dash")
    server = serve()
    log_in(page, server)
    page.click("#nav-batches")
    row = page.locator(f'#batches tr[data-batch="{batch.id}"]')
    expect(row).to_contain_text("november mailing")
    expect(row.locator("[data-state]")).to_have_text("open")
    expect(row.locator('td[data-count="total"]')).to_have_text("20")
    expect(row.locator('td[data-count="pending"]')).to_have_text("20")
    expect(row).to_contain_text("0/20")
    screenshot(page, "batches")
    row.locator("a").click()
    expect(page.locator("#state [data-state]")).to_have_text("open")
    assert (count(page, "total"), count(page, "pending"), count(page, "done")) == ("20", "20", "0")
    expect(page.locator('dd[data-field="queues"]')).to_have_text("dash")
    page.click("#close-batch")
    expect(page.locator("#flash")).to_have_text(f"batch {batch.id} closed: no job joins it now")
    expect(page.locator("#state [data-state]")).to_have_text("closed")
    expect(page.locator("#close-batch")).to_have_count(0)
    screenshot(page, "batch-closed")
    page.click("#cancel-batch")
    expect(page.locator("#question")).to_have_text(
        f"Cancel batch {batch.id}? Its waiting jobs will never run (those running finish)."
    )
    status = app.batch_status(batch.id)
    assert status is not None and status.cancelled == 0  # nothing cancelled before the yes
    page.click("#confirm")
    expect(page.locator("#flash")).to_have_text(
        f"batch {batch.id} cancelled: 20 waiting jobs will never run"
    )
    # every job was waiting: each is cancelled, so the batch has ended, cancelled
    expect(page.locator("#state [data-cancelled]")).to_have_text("cancelled")
    expect(page.locator("#state [data-state]")).to_have_text("ended")
    assert (count(page, "cancelled"), count(page, "pending")) == ("20", "0")
    expect(page.locator('dd[data-field="cancelled"]')).to_contain_text(" UTC")
    expect(page.locator("#cancel-batch")).to_have_count(0)
    screenshot(page, "batch-cancelled")
    status = app.batch_status(batch.id)
    assert status is not None and (status.state, status.cancelled) == ("ended", 20)
    assert app.stats("dash")["cancelled"] == 20


def test_a_batch_running_is_followed_live_to_its_end(
    page: Page,
    serve: Callable[..., Server],
    pool: Callable[..., DashPool],
    app: fastq.App,
    r: redis.Redis,
) -> None:
    server = serve()
    with app.batch(description="retried", close=False) as batch:
        app.enqueue_many("ok", [(i,) for i in range(5)], queue="dash")
        app.enqueue("flaky", args=[99], queue="dash")  # dies: no flag set
    log_in(page, server, f"/batches/{batch.id}")
    assert count(page, "pending") == "6"
    app.close_batch(batch.id)
    pool("-c", "1", "-q", "dash").wait_children(1)
    # the page polls its counts: no reload
    expect(page.locator("#state [data-state]")).to_have_text("ended", timeout=20_000)
    counts = [count(page, n) for n in ("total", "pending", "done", "failed", "dead", "cancelled")]
    assert counts == ["6", "0", "5", "1", "1", "0"]
    expect(page.locator("#state [data-cancelled]")).to_have_count(0)
    expect(page.locator("#cancel-batch")).to_have_count(0)  # the buttons follow the state
    screenshot(page, "batch-ended")


def test_a_batch_cancelled_while_a_job_runs_is_cancelled_until_it_ends(
    page: Page,
    serve: Callable[..., Server],
    pool: Callable[..., DashPool],
    app: fastq.App,
    r: redis.Redis,
) -> None:
    server = serve()
    with app.batch(description="held") as batch:
        app.enqueue("held", args=[1], queue="dash")  # runs until released
        app.enqueue_many("ok", [(i,) for i in range(2, 6)], queue="dash")
    # one job a claim: the child holds the held job alone, the others wait
    pool("-c", "1", "-q", "dash", "--batch", "1").wait_children(1)
    log_in(page, server, f"/batches/{batch.id}")
    expect(page.locator('#counts td[data-count="pending"]')).to_have_text("5")
    wait_until(lambda: app.stats("dash")["inflight"] == 1, 20, "the held job to start")
    page.click("#cancel-batch")
    page.click("#confirm")
    expect(page.locator("#flash")).to_have_text(
        f"batch {batch.id} cancelled: 4 waiting jobs will never run"
    )
    expect(page.locator("#state [data-state]")).to_have_text("cancelled")
    assert (count(page, "cancelled"), count(page, "pending")) == ("4", "1")
    expect(page.locator("#state [data-cancelled]")).to_have_count(0)  # said once
    for button in ("#close-batch", "#cancel-batch"):
        expect(page.locator(button)).to_have_count(0)
    screenshot(page, "batch-cancelling")
    r.rpush(f"{app.namespace}:release", 1)
    # the running job finishes, counted done; the page follows by itself
    expect(page.locator("#state [data-state]")).to_have_text("ended", timeout=20_000)
    expect(page.locator("#state [data-cancelled]")).to_have_text("cancelled")
    counts = [count(page, n) for n in ("total", "pending", "done", "cancelled")]
    assert counts == ["5", "0", "1", "4"]


def test_read_only_shows_no_batch_action_and_refuses_them(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    with app.batch(close=False) as batch:
        app.enqueue("ok", args=[1], queue="dash")
    server = serve("--read-only")
    log_in(page, server, f"/batches/{batch.id}")
    expect(page.locator("#state [data-state]")).to_have_text("open")
    expect(page.locator("#cancel-batch")).to_have_count(0)
    expect(page.locator("#close-batch")).to_have_count(0)
    for path in ("/actions/cancel-batch", "/actions/close-batch"):
        refused = page.request.post(server.base_url + path, form={"id": batch.id})
        assert refused.status == 403, path
        assert "read-only" in refused.text()
    status = app.batch_status(batch.id)
    assert status is not None and (status.state, status.pending) == ("open", 1)
    missing = page.goto(server.base_url + "/batches/nope")
    assert missing is not None and missing.status == 404
    expect(page.locator("body")).to_contain_text("no batch 'nope': never opened, or it expired")
