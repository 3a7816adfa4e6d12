"""The queue page and the job page, as a person uses them: a dead job found through
the queue page, retried from its page, and then run by the pool; a queue paused and
resumed, rate-limited, purged after a confirm step; its jobs by state, page by page,
and found by id and by tag; actions refused without their CSRF token."""

from __future__ import annotations

import re
from typing import Callable

import pytest
import redis
from playwright.sync_api import Page, expect

import fastq
from tests.support.dashboard import DashPool, log_in, screenshot
from tests.support.pool import wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(60)


def test_a_dead_job_is_found_retried_from_its_page_and_runs(
    page: Page,
    serve: Callable[..., Server],
    pool: Callable[..., DashPool],
    app: fastq.App,
    r: redis.Redis,
) -> None:
    server = serve()
    pool("-c", "1", "-q", "dash").wait_children(1)
    job_id = app.enqueue("flaky", args=[7], queue="dash")
    wait_until(lambda: app.stats("dash")["dead"] == 1, 20, "the job to die")
    log_in(page, server)
    page.click('#queues a[href="/queues/dash"]')
    page.click("#tab-dead")
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(row).to_contain_text("the SMTP server refused message 7")
    screenshot(page, "queue-dead")
    row.locator("a").click()
    expect(page.locator("#state")).to_have_text("dead")
    expect(page.locator("#name")).to_have_text("flaky")
    expect(page.locator("#args")).to_have_text("[7]")
    expect(page.locator("#traceback")).to_contain_text("RuntimeError: the SMTP server refused")
    screenshot(page, "job-dead")
    r.set(f"{app.namespace}:fixed", 1)  # the fault is fixed: the retry will run it
    page.click("#retry")
    expect(page.locator("#flash")).to_have_text(f"job {job_id} is queued again")
    wait_until(lambda: r.hget(f"{app.namespace}:runs", "7") == b"1", 20, "the retried job to run")
    page.reload()
    expect(page.locator("#state")).to_have_text("done")
    screenshot(page, "job-done")
    stats = app.stats("dash")
    assert (stats["dead"], stats["processed"]) == (0, 1)


def test_a_job_in_flight_shows_its_worker_and_for_how_long(
    page: Page,
    serve: Callable[..., Server],
    pool: Callable[..., DashPool],
    app: fastq.App,
    r: redis.Redis,
) -> None:
    server = serve()
    (child,) = pool("-c", "1", "-q", "dash").wait_children(1)
    job_id = app.enqueue("held", args=[5], queue="dash")
    wait_until(lambda: app.stats("dash")["inflight"] == 1, 20, "the job to start")
    log_in(page, server, "/queues/dash?state=active")
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')

    def named() -> bool:  # the worker registry says which child runs it (every 2 s)
        if f"pid {child.pid}" in row.inner_text():
            return True
        page.reload()
        return False

    wait_until(named, 10, "the page to name the child running the job")
    expect(row).to_contain_text("held")
    expect(row.locator("td").nth(3)).to_have_text(re.compile(r"^\d+s$"))  # running for
    screenshot(page, "queue-in-flight")
    row.locator("a").click()
    expect(page.locator("#state")).to_have_text("active")
    expect(page.locator("dl.fields")).to_contain_text(f"pid {child.pid}, running for")
    r.rpush(f"{app.namespace}:release", 1)
    wait_until(lambda: r.hget(f"{app.namespace}:runs", "5") == b"1", 20, "the job to end")


def test_a_queue_is_paused_and_resumed_from_its_page(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.enqueue("ok", args=[1], queue="dash")
    server = serve()
    log_in(page, server, "/queues/dash")
    page.click("#pause")
    expect(page.locator("#flash")).to_contain_text("paused dash")
    expect(page.locator('#counts td[data-count="paused"]')).to_have_text("paused")
    assert app.stats("dash")["paused"] == 1
    screenshot(page, "queue-paused")
    page.click("#resume")
    expect(page.locator("#flash")).to_have_text("resumed dash")
    expect(page.locator('#counts td[data-count="paused"]')).to_have_text("running")
    assert app.stats("dash")["paused"] == 0
    # paused elsewhere (the CLI): the page's counts follow within a poll
    app.pause("dash")
    expect(page.locator('#counts td[data-count="paused"]')).to_have_text("paused")


def test_a_rate_limit_is_set_and_lifted(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.declare_queue("dash")
    server = serve()
    log_in(page, server, "/queues/dash")
    page.fill("#rate", "14")
    page.click("#set-rate")
    expect(page.locator("#flash")).to_have_text("rate limit of dash: 14/s (burst 1)")
    assert str(app.rate_limit("dash")) == "14/s (burst 1)"
    page.fill("#rate", "2000000")  # above what fastq takes: refused, the limit kept
    page.click("#set-rate")
    expect(page.locator("#flash")).to_contain_text("rate limit not set: ")
    assert str(app.rate_limit("dash")) == "14/s (burst 1)"
    page.fill("#rate", "")
    page.click("#set-rate")
    expect(page.locator("#flash")).to_have_text("rate limit of dash: none")
    assert app.rate_limit("dash") is None


def test_a_purge_asks_first(page: Page, serve: Callable[..., Server], app: fastq.App) -> None:
    app.enqueue_many("ok", [(i,) for i in range(3)], queue="dash", delay_s=600)
    app.enqueue("ok", args=[9], queue="dash")
    server = serve()
    log_in(page, server, "/queues/dash")
    page.check('input[name="scheduled"]')
    page.click("#purge")
    expect(page.locator("#question")).to_have_text(
        "Delete every scheduled job of queue dash, for good?"
    )
    screenshot(page, "purge-confirm")
    assert app.stats("dash")["scheduled"] == 3  # nothing deleted before the yes
    page.click("#not-now")
    assert app.stats("dash")["scheduled"] == 3
    page.check('input[name="scheduled"]')
    page.click("#purge")
    page.click("#confirm")
    expect(page.locator("#flash")).to_have_text("purged 3 jobs (scheduled) from dash")
    stats = app.stats("dash")
    assert (stats["scheduled"], stats["ready"]) == (0, 1)


def test_jobs_by_state_page_by_page_and_found_by_id_and_tag(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    ids = app.enqueue_many("ok", [(i,) for i in range(120)], queue="dash")
    tagged = app.enqueue("ok", args=[500], queue="dash", tags=["customer:42"], delay_s=60)
    server = serve()
    log_in(page, server, "/queues/dash")
    expect(page.locator("#tab-queued")).to_have_text("ready (120)")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(50)
    # in the order workers claim them: the first enqueued first
    assert rows.first.get_attribute("data-job") == ids[0]
    page.click("#next")
    expect(rows).to_have_count(50)
    assert rows.first.get_attribute("data-job") == ids[50]
    page.click("#next")
    expect(rows).to_have_count(20)
    assert rows.last.get_attribute("data-job") == ids[119]
    expect(page.locator("#next")).to_have_count(0)
    page.click("#tab-scheduled")
    expect(page.locator(f'#jobs tr[data-job="{tagged}"]')).to_contain_text("[500]")
    page.fill("#search-tag", "customer:42")
    page.click("#find-tag")
    expect(page.locator(f'#jobs tr[data-job="{tagged}"]')).to_contain_text("scheduled")
    screenshot(page, "queue-tag")
    page.fill("#search-id", ids[77])
    page.click("#find-id")
    expect(page.locator("#args")).to_have_text("[77]")
    expect(page.locator("#state")).to_have_text("queued")
    page.goto(server.base_url + "/queues/dash?id=nosuchid")
    expect(page.locator("#flash")).to_have_text("no job 'nosuchid' in dash")


def test_a_job_is_cancelled_after_a_confirm_step(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    job_id = app.enqueue("ok", args=[3], queue="dash", delay_s=600)
    server = serve()
    log_in(page, server, f"/jobs/{job_id}?queue=dash")
    expect(page.locator("#state")).to_have_text("scheduled")
    page.click("#cancel")
    expect(page.locator("#question")).to_have_text(f"Cancel job {job_id}?")
    page.click("#confirm")
    expect(page.locator("#flash")).to_have_text(f"job {job_id} cancelled")
    expect(page.locator("#state")).to_have_text("cancelled")
    info = app.get_job(job_id, "dash")
    assert info is not None and info.state == "cancelled"


def test_a_broken_job_is_deleted_from_its_page_after_a_confirm_step(
    page: Page, serve: Callable[..., Server], app: fastq.App, r: redis.Redis
) -> None:
    # quarantined as a worker leaves it: its payload in jobs, its reason in broken
    keys = app.keys("dash")
    r.hset(keys.jobs, "bad-1", b'["nosuchjob",[1],1795457347206]')
    r.hset(keys.broken, "bad-1", "unknown job name 'nosuchjob'")
    server = serve()
    log_in(page, server, "/jobs/bad-1?queue=dash")
    expect(page.locator("#state")).to_have_text("broken")
    page.click("#delete")
    expect(page.locator("#question")).to_have_text("Delete job bad-1 for good?")
    page.click("#confirm")
    expect(page.locator("#flash")).to_have_text("job bad-1 deleted")
    assert "/queues/dash?" in page.url  # back to its queue: the job is gone
    assert app.get_job("bad-1", "dash") is None
    assert (r.hexists(keys.broken, "bad-1"), r.hexists(keys.jobs, "bad-1")) == (False, False)


def test_actions_without_their_csrf_token_are_refused(
    page: Page, serve: Callable[..., Server], app: fastq.App
) -> None:
    app.declare_queue("dash")
    server = serve()
    log_in(page, server)
    for path, form in (
        ("/queues/dash/pause", {"back": "/"}),
        ("/queues/dash/purge", {"ready": "1", "confirmed": "1"}),
        ("/actions/retry", {"id": "x", "queue": "dash"}),
    ):
        refused = page.request.post(server.base_url + path, form=form)
        assert refused.status == 403, path
        assert "missing or wrong CSRF token" in refused.text()
        forged = page.request.post(server.base_url + path, form={**form, "csrf": "0" * 64})
        assert forged.status == 403, path
    assert app.stats("dash")["paused"] == 0
    with server.client() as bearer:  # the header opens pages, not actions without a token
        assert bearer.post("/queues/dash/pause", data={"csrf": "forged"}).status_code == 403
    with server.client(token=None) as anon:
        assert anon.post("/queues/dash/pause").status_code == 401
    assert app.stats("dash")["paused"] == 0
