"""Fixtures of the dashboard's browser tests: Debian's Chromium driven by Playwright
(one browser per test process, a fresh context per test), a ``fastq serve`` and a
``fastq pool`` of ``tests.apps.dash_jobs`` on the session's Redis, in the test's
namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from fastq.testing.redis_server import RedisServer
from tests.support.dashboard import APP, CHROMIUM, CHROMIUM_ARGS, DashPool
from tests.support.serve import Server, Servers


# per module, not per session: while Playwright's sync API is started, an asyncio
# loop runs in this thread, and a test run beside these in the same process (ci/test.sh
# runs them with the unit tests) could not call asyncio.run()
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    yield tab
    context.close()


@pytest.fixture
def serve(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., Server]]:
    """Starts ``fastq serve --app tests.apps.dash_jobs`` with these options."""
    servers = Servers(redis_server.url, namespace, tmp_path)

    def run(*args: str, **kwargs: Any) -> Server:
        return servers.start("--app", APP, *args, **kwargs)

    yield run
    servers.stop_all()


@pytest.fixture
def pool(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., DashPool]]:
    """Starts ``fastq pool --app tests.apps.dash_jobs`` with these options."""
    pools: list[DashPool] = []

    def run(*args: str) -> DashPool:
        started = DashPool(redis_server.url, namespace, tmp_path / f"pool{len(pools)}.log", *args)
        pools.append(started)
        return started

    yield run
    for started in pools:
        started.stop()
