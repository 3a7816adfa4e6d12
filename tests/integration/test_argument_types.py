"""Arguments arrive as sent, or the enqueue is refused: a value JSON cannot carry as
it is (a datetime, a date, a UUID, a Decimal, a set) raises a TypeError that names
where it is, from every way of enqueueing, and nothing reaches Redis."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable

import pytest
import redis

import fastq
from tests.support.keys import namespace_keys

RULE = (
    "arguments must be JSON values (None, bool, int, float, str, list, tuple, dict with "
    "str keys), which the job gets as sent; send "
)
VALUES: dict[str, tuple[Any, str]] = {
    "aware-datetime": (
        datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc),
        "is a datetime.datetime: " + RULE + "value.isoformat() and datetime.fromisoformat() "
        "in the job (an aware datetime keeps its offset)",
    ),
    "naive-datetime": (
        datetime(2026, 12, 1, 9, 30),
        "is a datetime.datetime: " + RULE + "value.isoformat() and datetime.fromisoformat() "
        "in the job (an aware datetime keeps its offset)",
    ),
    "date": (
        date(2026, 12, 1),
        "is a datetime.date: " + RULE + "value.isoformat() and date.fromisoformat() in the job",
    ),
    "uuid": (
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "is a uuid.UUID: " + RULE + "str(value) and uuid.UUID() in the job",
    ),
    "decimal": (
        Decimal("9.99"),
        "is a decimal.Decimal: " + RULE + "str(value) and decimal.Decimal() in the job",
    ),
    "set": ({"a", "b"}, "is a set: " + RULE + "a list, e.g. sorted(value)"),
}

Enqueue = Callable[[fastq.App, fastq.JobDef[None], Any], Any]
# Every way of enqueueing, the value nested in args or in kwargs, and the path the
# message must name.
WAYS: dict[str, tuple[Enqueue, str]] = {
    "app.enqueue-args": (
        lambda a, j, v: a.enqueue("send", [1, {"when": v}]),
        "args[1]['when'] ",
    ),
    "app.enqueue-kwargs": (
        lambda a, j, v: a.enqueue("send", [], {"at": [0, 1, v]}),
        "kwargs['at'][2] ",
    ),
    "app.enqueue-unregistered": (
        lambda a, j, v: a.enqueue("elsewhere", [[v]], queue="q"),
        "args[0][0] ",
    ),
    "app.enqueue_many-args": (
        lambda a, j, v: a.enqueue_many("send", [(1,), (2, {"when": v})]),
        "call 1: args[1]['when'] ",
    ),
    "app.enqueue_many-kwargs": (
        lambda a, j, v: a.enqueue_many("send", [{"at": 1}, {"x": 2}, {"at": [v]}]),
        "call 2: kwargs['at'][0] ",
    ),
    "job.enqueue-args": (lambda a, j, v: j.enqueue("x", (v,)), "args[1][0] "),
    "job.enqueue-kwargs": (
        lambda a, j, v: j.enqueue(at={"d": {"e": v}}),
        "kwargs['at']['d']['e'] ",
    ),
    "job.enqueue_with": (
        lambda a, j, v: j.enqueue_with(priority=3, job_id="once")(1, when=v),
        "kwargs['when'] ",
    ),
    "job.enqueue_in": (lambda a, j, v: j.enqueue_in(30, v), "args[0] "),
    "job.enqueue_at": (
        lambda a, j, v: j.enqueue_at(datetime(2030, 1, 1, tzinfo=timezone.utc), [v]),
        "args[0][0] ",
    ),
    "job.enqueue_many": (
        lambda a, j, v: j.enqueue_many([(1,), (2,), (3,), ([1, 2, v],)], tags=["t"]),
        "call 3: args[0][2] ",
    ),
}


@pytest.fixture
def send(app: fastq.App) -> fastq.JobDef[None]:
    @app.job(queue="q")
    def send(*args: Any, **kwargs: Any) -> None: ...

    return send


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("value", sorted(VALUES))
def test_a_value_json_cannot_carry_is_refused_where_it_is(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None], way: str, value: str
) -> None:
    enqueue, path = WAYS[way]
    bad, reason = VALUES[value]
    with pytest.raises(TypeError) as info:
        enqueue(app, send, bad)
    assert type(info.value) is TypeError
    assert str(info.value) == path + reason
    assert namespace_keys(r, app.namespace) == []


def test_a_periodic_schedule_with_such_an_argument_is_refused(app: fastq.App) -> None:
    def tick(when: Any) -> None: ...

    with pytest.raises(TypeError) as info:
        app.periodic(every_s=60, args=(date(2026, 1, 1),))(tick)
    assert str(info.value) == "args[0] " + VALUES["date"][1]
    assert app.schedules == {}


def test_what_is_sent_instead_arrives_as_sent(
    app: fastq.App, r: redis.Redis, send: fastq.JobDef[None]
) -> None:
    when = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
    job_id = send.enqueue(when.isoformat(), str(uuid.UUID(int=5)), str(Decimal("9.99")), (1, 2))
    info = app.get_job(job_id)
    assert info is not None
    # a tuple is sent as a JSON array (a list): the one change JSON makes, documented
    assert info.args == [
        "2026-12-01T09:30:00+00:00",
        "00000000-0000-0000-0000-000000000005",
        "9.99",
        [1, 2],
    ]
    assert datetime.fromisoformat(info.args[0]) == when
