"""A job's name is 1 to 200 printable characters on every path that makes a job:
registration, a Python enqueue (one, many, the test mode) and an HTTP enqueue each
refuse another with the same rule, named, and nothing is written (the enqueue
script's own check, for a producer of another language: tests/lua/test_enqueue_validation.py)."""

from __future__ import annotations

import pytest
import redis

import fastq
from tests.support.http import ServedWorkers, post

BAD_NAMES = ["n" * 201, "é" * 201, "line\nbreak", "tab\there", "esc\x1b[31m", ""]
RULE = "must be 1 to 200 printable characters"


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_refused_by_every_python_path(
    app: fastq.App, r: redis.Redis, name: str
) -> None:
    app.declare_queue("q")
    before = r.dbsize()
    with pytest.raises(ValueError, match=RULE if name else "invalid job name ''"):
        app.enqueue(name, queue="q")
    with pytest.raises(ValueError, match=RULE):
        app.enqueue_many(name, [[1], [2]], queue="q")
    with pytest.raises(ValueError, match=RULE), app.stub():
        app.enqueue(name, queue="q")
    assert r.dbsize() == before
    if name:  # an empty name is "give it a name="
        with pytest.raises(ValueError, match=RULE):
            app.job(name=name)(lambda: None)
        assert name not in app.registry


def test_a_bad_name_over_http_is_a_422_naming_the_rule(app: fastq.App, r: redis.Redis) -> None:
    app.declare_queue("q")
    server = ServedWorkers(app).start()
    try:
        with server.client() as http:
            for name in BAD_NAMES[:-1]:
                status, body = post(http, "/api/v1/queues/q/jobs", {"name": name})
                assert status == 422 and RULE in body["error"], (name, body)
            status, body = post(http, "/api/v1/queues/q/jobs", {"name": "fine name"})
            assert status == 200, body
    finally:
        server.stop()
    assert app.stats("q")["ready"] == 1
