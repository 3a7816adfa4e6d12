"""A queue page lists jobs of any size of arguments at a bounded cost: each row shows
a preview of its arguments (at most ``PREVIEW_CHARS`` characters), and the job's own
page shows them whole."""

from __future__ import annotations

import re

import pytest

import fastq
from fastq.serve.pages.filters import PREVIEW_CHARS
from tests.support.http import ServedWorkers

pytestmark = pytest.mark.timeout(60)


def test_a_listing_previews_big_arguments_and_the_job_page_shows_them_whole(
    app: fastq.App,
) -> None:
    app.declare_queue("big")
    big = "x" * (1024 * 1024)
    ids = [app.enqueue("blob", [big, n], {"name": "<b>"}, queue="big") for n in range(5)]
    app.enqueue("small", [1, 2], {"to": "a"}, queue="big", job_id="small")
    server = ServedWorkers(app).start()
    try:
        with server.client() as http:
            page = http.get("/queues/big?state=queued", headers={"accept": "text/html"})
            assert page.status_code == 200
            # five rows of 1 MiB each would be 5 MiB
            assert len(page.text) < 100_000
            cells = re.findall(r"<td><code>(.*?)</code></td>", page.text, re.S)
            assert len(cells) == 6
            assert "[1, 2] {&#34;to&#34;: &#34;a&#34;}" in cells
            cut = [c for c in cells if c.startswith("[&#34;xxx")]
            assert len(cut) == 5 and all(c.endswith("…") for c in cut)
            assert all(len(c.replace("&#34;", '"')) == PREVIEW_CHARS for c in cut)
            job = http.get(f"/jobs/{ids[0]}?queue=big", headers={"accept": "text/html"})
            assert job.status_code == 200 and big in job.text
    finally:
        server.stop()
