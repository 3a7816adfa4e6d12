"""``fastq batch status|list|cancel|close``: what ``app.batch_status`` knows of a
batch, for a person or as JSON; an unknown id is one line and exit status 1."""

from __future__ import annotations

import orjson

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import run_cli
from tests.support.workers import drain


def batch_cli(url: str, namespace: str, *args: str) -> tuple[int, str, str]:
    proc = run_cli(url, "batch", *args, "--namespace", namespace, timeout=30)
    return proc.returncode, proc.stdout, proc.stderr


def fields(out: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in out.splitlines())


def test_status_of_a_batch_that_ran_for_a_person_and_as_json(
    redis_server: RedisServer, app: fastq.App
) -> None:
    @app.job(queue="count", retries=0)
    def work(n: int) -> None:
        if n == 3:
            raise ValueError("three")

    with app.batch(description="nightly import", id="import-1") as batch:
        work.enqueue_many([(i,) for i in range(10)])
    drain(app, ["count"])
    code, out, err = batch_cli(redis_server.url, app.namespace, "status", batch.id)
    assert code == 0, err
    shown = fields(out)
    assert (shown["id"], shown["state"], shown["description"]) == (
        "import-1",
        "ended",
        "nightly import",
    )
    counts = [shown[k] for k in ("total", "pending", "done", "failed", "dead", "cancelled")]
    assert counts == ["10", "0", "9", "1", "1", "0"]
    assert shown["queues"] == "count" and shown["cancelled_at"] == "-"
    assert shown["started_at"].endswith("+00:00") and shown["ended_at"].endswith("+00:00")
    code, out, err = batch_cli(redis_server.url, app.namespace, "status", batch.id, "--json")
    assert code == 0, err
    status = orjson.loads(out)
    assert status == app.batch_status(batch.id).as_dict()  # type: ignore[union-attr]
    assert (status["total"], status["done"], status["dead"], status["pending"]) == (10, 9, 1, 0)
    assert isinstance(status["started_at"], float) and isinstance(status["ended_at"], float)


def test_list_newest_first_then_close_and_cancel(redis_server: RedisServer, app: fastq.App) -> None:
    with app.batch(description="first", close=False) as first:
        app.enqueue_many("count", [(i,) for i in range(3)], queue="count")
    with app.batch(description="second", close=False) as second:
        app.enqueue_many("count", [(i,) for i in range(5)], queue="count")
    code, out, err = batch_cli(redis_server.url, app.namespace, "list")
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        [second.id, "open", "total=5"],
        [first.id, "open", "total=3"],
    ]
    assert lines[0].endswith(" second") and "pending=5 done=0" in lines[0]
    code, out, _ = batch_cli(redis_server.url, app.namespace, "list", "--limit", "1", "--json")
    assert [s["id"] for s in orjson.loads(out)] == [second.id]
    code, out, err = batch_cli(redis_server.url, app.namespace, "close", first.id)
    assert (code, out) == (0, f"batch {first.id} is closed: no job joins it now (3 pending)\n")
    code, out, err = batch_cli(redis_server.url, app.namespace, "cancel", second.id)
    assert code == 0, err
    # nothing ran them: every job was waiting, so the batch ended, cancelled
    assert (
        out == f"cancelled batch {second.id}: 5 waiting jobs will never run, 0 running "
        "finish; it is ended\n"
    )
    status = app.batch_status(second.id)
    assert status is not None and (status.cancelled, status.pending) == (5, 0)
    assert status.cancelled_at is not None and app.stats("count")["cancelled"] == 5
    code, out, _ = batch_cli(redis_server.url, app.namespace, "cancel", second.id)
    assert (code, out) == (1, f"batch {second.id} has ended: nothing to cancel\n")


def test_an_unknown_batch_is_one_line_and_exit_1(redis_server: RedisServer, app: fastq.App) -> None:
    where = f"{redis_server.url}, namespace {app.namespace!r}"
    for action in ("status", "close", "cancel"):
        code, out, err = batch_cli(redis_server.url, app.namespace, action, "nope")
        assert (code, out) == (1, ""), action
        assert err.strip().splitlines() == [
            f"fastq: error: no batch 'nope' on {where}: never opened, or it expired (a "
            "batch is kept 7 days after it ended); without --app this command reads "
            "$FASTQ_REDIS_URL: add --app MODULE to read the app's"
        ], action
    code, out, err = batch_cli(redis_server.url, app.namespace, "list")
    assert (code, out) == (0, f"no batch on {where}\n")
    code, _, err = batch_cli(redis_server.url, app.namespace, "list", "--limit", "0")
    assert code == 2 and "--limit must be at least 1" in err
    code, _, err = batch_cli(redis_server.url, app.namespace, "status")
    assert code == 2 and "batch_id" in err
