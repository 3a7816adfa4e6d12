"""The dashboard's forms take any input without a server error: every action route
(and its path's queue) gets forms of the fields the views read, with values drawn
from what a person or a script may type (huge numbers, ``²``, control characters,
megabytes of ``9``), over a real Redis, with a session and its CSRF token. Each
reply is a redirect back, a refusal (4xx) or a page; never a 5xx."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastq
from fastq.serve.app import create_app
from fastq.testing.redis_server import RedisServer
from tests.support.examples import examples
from tests.support.serve import TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# the action routes of the pages (fastq.serve.pages.routes), {queue} filled in
ACTIONS = [
    "/queues/{queue}/pause",
    "/queues/{queue}/resume",
    "/queues/{queue}/rate_limit",
    "/queues/{queue}/purge",
    "/queues/{queue}/pause-group",
    "/queues/{queue}/resume-group",
    "/actions/retry",
    "/actions/cancel",
    "/actions/delete",
    "/actions/cancel-batch",
    "/actions/close-batch",
    "/actions/key-rate",
    "/login",
    "/logout",
]
# every field a view reads (grep 'form.get' in fastq/serve/pages)
FIELDS = [
    "id",
    "queue",
    "rate",
    "per_s",
    "burst",
    "confirmed",
    "back",
    "next",
    "token",
    "ready",
    "scheduled",
    "dead",
    "broken",
    "key",
    "csrf",
    "group",
]

values = st.one_of(
    st.sampled_from(["", "1", "0", "-1", "web", "1e309", "nan", "inf", "²", "0x10", " 3 "]),
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=40),
    st.just("9" * 5000),
    st.just("/" + "a" * 300),
)
forms = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6)
queues = st.one_of(st.just("web"), st.text(min_size=1, max_size=30))


def post(asgi: Any, path: str, form: dict[str, str]) -> int:
    """A POST of ``form`` straight into the app, as a browser on the page sends it."""
    body = urlencode(form).encode()
    sent: list[Any] = []
    chunks = [body]

    async def receive() -> Any:
        if chunks:
            return {"type": "http.request", "body": chunks.pop(), "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    headers = {
        "host": "127.0.0.1:8000",
        "authorization": f"Bearer {TOKEN}",
        "content-type": "application/x-www-form-urlencoded",
        "accept": "text/html",
        "sec-fetch-site": "same-origin",
        "content-length": str(len(body)),
    }
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(asgi(scope, receive, send))
    status: int = sent[0]["status"]
    return status


@pytest.fixture
def asgi(redis_server: RedisServer, namespace: str) -> Any:
    app = fastq.App(redis_server.url, namespace=namespace)
    app.declare_queue("web")
    app.enqueue_many("anything", [()] * 3, queue="web")
    yield create_app(app, TOKEN)
    app.close()


@pytest.mark.parametrize("action", ACTIONS)
def test_no_form_makes_a_server_error(asgi: Any, action: str) -> None:
    csrf = asgi.state.sessions.csrf("bearer")

    @given(queue=queues, form=forms, with_csrf=st.booleans())
    @settings(
        max_examples=examples(60),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(queue: str, form: dict[str, str], with_csrf: bool) -> None:
        path = action.replace("{queue}", quote(queue, safe=""))
        if with_csrf:
            form = {**form, "csrf": csrf}
        status = post(asgi, path, form)
        assert status < 500, (path, form, status)

    check()
