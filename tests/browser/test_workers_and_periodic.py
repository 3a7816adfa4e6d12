"""The workers page (the live worker registry: a pool's children listed while idle,
and gone within seconds of the pool's stop) and the periodic jobs' page."""

from __future__ import annotations

import re
from typing import Callable

import pytest
from playwright.sync_api import Page, expect

import fastq
from tests.support.dashboard import DashPool, log_in, screenshot
from tests.support.pool import wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(60)


def test_the_workers_page_lists_an_idle_pools_children_and_drops_them_at_its_stop(
    page: Page, serve: Callable[..., Server], pool: Callable[..., DashPool], app: fastq.App
) -> None:
    server = serve()
    started = pool("-c", "2", "-q", "dash")
    children = started.wait_children(2)
    log_in(page, server, "/workers")
    entry = page.locator(f'#workers section[data-entry$=":{started.proc.pid}"]')
    for child in children:
        row = entry.locator(f'tr[data-pid="{child.pid}"]')
        expect(row).to_have_count(1)  # announced every 2 s: listed within a poll or two
        expect(row.locator("td[data-state]")).to_have_text(re.compile("^(idle|waiting)$"))
    expect(entry).to_contain_text("queues dash")
    expect(entry).to_contain_text("2/2 workers")
    entries = app.workers()
    assert [e["pid"] for e in entries] == [started.proc.pid]
    screenshot(page, "workers")
    assert started.stop() == 0
    # a pool that stops withdraws its entry: the page drops it within a poll
    expect(page.locator("#no-workers")).to_be_visible(timeout=10_000)
    expect(entry).to_have_count(0)
    assert app.workers() == []


def test_the_periodic_page_shows_each_schedule_its_last_and_next_fire(
    page: Page, serve: Callable[..., Server], pool: Callable[..., DashPool], app: fastq.App
) -> None:
    server = serve()
    log_in(page, server, "/periodic")
    vacuum = page.locator('#periodic tr[data-periodic="vacuum"]')
    expect(vacuum.locator('td[data-field="schedule"]')).to_have_text(
        "cron '30 2 * * *' Europe/Berlin"
    )
    expect(vacuum.locator('td[data-field="last"]')).to_have_text("never")
    expect(vacuum.locator('td[data-field="next"]')).to_contain_text("T02:30:00+01:00")
    # a pool's reaper fires tick every second: its last fire and run show on a reload
    pool("-c", "1", "-q", "ticks")
    wait_until(lambda: app.stats("ticks")["enqueued"] >= 1, 20, "tick to fire")
    page.reload()
    tick = page.locator('#periodic tr[data-periodic="tick"]')
    expect(tick.locator('td[data-field="schedule"]')).to_have_text("every 1s")
    expect(tick.locator('td[data-field="last"]')).not_to_have_text("never")
    run = tick.locator("td a[href^='/jobs/']")
    expect(run).to_have_count(1)
    screenshot(page, "periodic")
    run.click()  # its run's page: queued, running or done by now
    expect(page.locator("#state")).to_have_text(re.compile("^(queued|active|done)$"))
    expect(page.locator("dl.fields a")).to_have_text("ticks")
