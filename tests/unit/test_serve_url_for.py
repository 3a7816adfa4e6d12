"""The dashboard's links: every one is ``url_for`` of a route's name, a path under
``--root-path`` (never an absolute URL: behind a proxy that ends TLS it would name
the server's scheme), its path parameters quoted whole, the rest its query."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

import fastq
from fastq.serve.app import create_app
from fastq.serve.pages.handler import url_for

APP = create_app(fastq.App("redis://127.0.0.1:1/0"), "a-token-of-20-chars-x")


def request(root: str) -> Request:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": root + "/",
        "root_path": root,
        "headers": [],
        "query_string": b"",
        "app": APP,
    }
    return Request(scope)


@pytest.mark.parametrize("root", ["", "/fastq"])
def test_links_are_paths_under_the_root(root: str) -> None:
    r = request(root)
    assert url_for(r, "overview") == f"{root}/"
    assert url_for(r, "queue_page", queue="mail", state="dead", page=2) == (
        f"{root}/queues/mail?state=dead&page=2"
    )
    assert url_for(r, "static", path="vendor/htmx.min.js") == f"{root}/static/vendor/htmx.min.js"


def test_an_id_is_quoted_whole_and_none_is_left_out() -> None:
    r = request("/fastq")
    assert url_for(r, "job_page", job_id="a/b?c#d%", queue="q") == (
        "/fastq/jobs/a%2Fb%3Fc%23d%25?queue=q"
    )
    assert url_for(r, "job_page", job_id="x", queue=None) == "/fastq/jobs/x"
    assert url_for(r, "login", next="/queues/a?b=c") == "/fastq/login?next=%2Fqueues%2Fa%3Fb%3Dc"
