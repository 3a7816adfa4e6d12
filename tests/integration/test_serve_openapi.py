"""The OpenAPI document of ``fastq serve`` holds the server to it: schemathesis
sends what the document allows (and what it does not) to the app in process,
over a real Redis, and finds no server error and no reply outside the document.

Each operation gets a bounded number of examples, derandomized (the same ones
every run), in each mode: positive (valid requests) and negative (invalid ones,
which must be refused with a 4xx); then sequences of calls linked by what one
returns and the next takes (stateful).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

import fastq
from fastq.serve.app import create_app
from fastq.testing.redis_server import RedisServer
from tests.support.examples import examples
from tests.support.serve import TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# a third of them in CI (tests/support/examples.py), others each run
EXAMPLES = examples(160)

# every operation of the document (read without Redis: it is static)
_document = create_app(fastq.App("redis://127.0.0.1:1/0"), TOKEN).state.openapi
OPERATIONS = [
    (method.upper(), path)
    for path, item in _document["paths"].items()
    for method in item
    if method in ("get", "put", "post", "delete", "patch")
]


# a long-poll claim's wait, at most, in these runs: the document allows 30 s, which
# hundreds of examples cannot each spend (a wait is a wait: what a claim answers
# after it is tested in test_http_workers_ack.py)
SHORT_WAIT_S = 0.05


def short_wait(case: Any) -> Any:
    """``case`` with the ``wait_s`` of a claim's body, when a valid one, cut to
    SHORT_WAIT_S (still valid: the rest of the request as generated)."""
    body = getattr(case, "body", None)
    if isinstance(body, dict):
        wait_s = body.get("wait_s")
        if isinstance(wait_s, (int, float)) and not isinstance(wait_s, bool) and wait_s > 0:
            case.body = {**body, "wait_s": min(wait_s, SHORT_WAIT_S)}
    return case


@pytest.fixture
def api_schema(redis_server: RedisServer, namespace: str) -> Any:
    # an app that registers no job: every job the document allows is enqueued for
    # real, its options through the enqueue script
    app = fastq.App(redis_server.url, namespace=namespace)
    asgi = create_app(app, TOKEN)
    yield schemathesis.openapi.from_asgi("/api/v1/openapi.json", asgi, headers=AUTH)
    app.close()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_the_server_keeps_to_its_openapi_document(
    api_schema: Any, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(mode).map(short_wait))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,  # the same examples every run
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        # every check but one: a request the document allows may still be refused
        # (422) by a rule no schema states: a due time within ten years of now, a
        # registered function's parameters, unique_key without unique_for_s
        excluded = [positive_data_acceptance]
        if mode is GenerationMode.NEGATIVE and "Authorization" not in (case.headers or {}):
            # a case made invalid by leaving the token out, which the call puts back:
            # perhaps valid as sent, so its acceptance proves nothing (its other
            # checks stand: no server error, every reply as documented)
            excluded.append(negative_data_rejection)
        case.call_and_validate(headers=AUTH, excluded_checks=excluded)

    check()


def test_sequences_of_calls_linked_by_the_ids_they_return_keep_to_the_document(
    api_schema: Any, redis_server: RedisServer, namespace: str
) -> None:
    """Stateful: schemathesis chains the operations by what one returns and another
    takes (a queue's name from the listing, to enqueue, claim and pause it; a job's
    id from its enqueue, to report it done or failed; a batch's, to close or cancel
    it), as links it infers from the document, and checks every reply of every
    step."""
    app = fastq.App(redis_server.url, namespace=namespace)  # a queue to list
    app.enqueue_many("anything", [()] * 20, queue="web")
    app.close()
    machine = api_schema.as_state_machine()

    class Steps(machine):  # type: ignore[misc,valid-type]
        def before_call(self, case: Any) -> None:
            # as every client of the API sends it (a POST with no body too)
            case.headers = {**(case.headers or {}), "Content-Type": "application/json"}
            short_wait(case)

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, excluded_checks=[positive_data_acceptance])

    Steps.run(
        settings=settings(
            max_examples=examples(40),
            stateful_step_count=6,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
