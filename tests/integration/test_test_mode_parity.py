"""Parity: one job module (tests/apps/parity.py) run under a real ``fastq pool``
and under each test mode (``app.stub()`` + ``jobs.run()``, ``app.eager()``) gives
the same results, attempts, final states, errors and hook calls, read back the
same way (``app.get_job()``, ``app.result()``, the hooks' own record)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import fastq
from fastq.testing.redis_server import RedisServer
from tests.apps import parity
from tests.support.pool import Pool, wait_until

# (job, args): a value kept, progress reported, a failure then a success, a job
# out of retries, and a Fail returned
CALLS: list[tuple[str, list[Any]]] = [
    ("value", [21]),
    ("progress", [4]),
    ("flaky", ["k"]),
    ("doomed", []),
    ("refused", []),
]
ENDED = ("done", "dead", "broken")


def what_became(app: fastq.App, ids: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    """Each job's state, attempts and last error (``app.get_job()``), and what
    ``app.result()`` says of it."""
    seen: dict[str, tuple[Any, ...]] = {}
    for name, job_id in ids.items():
        info = app.get_job(job_id, queue="q")
        assert info is not None, name
        try:
            result: tuple[Any, ...] = ("result", app.result(job_id, timeout_s=0, queue="q"))
        except fastq.JobFailed as exc:
            result = ("failed", exc.state, exc.error)
        except fastq.NoResult:
            result = ("none",)
        error = info.last_error if info.state != "done" else None
        seen[name] = (info.state, info.attempts, error, result)
    return seen


def hook_calls(log: Path) -> dict[str, list[list[Any]]]:
    """What the hooks and the jobs noted, by job name, in order."""
    by_job: dict[str, list[list[Any]]] = {}
    for line in log.read_bytes().splitlines():
        entry = orjson.loads(line)
        by_job.setdefault(entry[1], []).append(entry)
    return by_job


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "parity.jsonl"
    monkeypatch.setenv("PARITY_LOG", str(path))
    yield path


def under_stub(log: Path) -> tuple[dict[str, tuple[Any, ...]], dict[str, list[list[Any]]]]:
    with parity.app.stub() as jobs:
        ids = {name: parity.app.enqueue(name, args) for name, args in CALLS}
        while jobs:
            with contextlib.suppress(ValueError):  # doomed's, once dead: the rest stays kept
                jobs.run()
        return what_became(parity.app, ids), hook_calls(log)


def under_eager(log: Path) -> tuple[dict[str, tuple[Any, ...]], dict[str, list[list[Any]]]]:
    with parity.app.eager() as jobs:
        ids = {}
        for name, args in CALLS:
            try:
                ids[name] = parity.app.enqueue(name, args)
            except ValueError:  # doomed's, once it is dead
                ids[name] = jobs.runs[-1].id
        return what_became(parity.app, ids), hook_calls(log)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_and_both_test_modes_run_the_same_module_alike(
    redis_server: RedisServer, namespace: str, tmp_path: Path, log: Path
) -> None:
    stub = under_stub(log)
    log.unlink()
    eager = under_eager(log)

    producer = fastq.App(redis_server.url, namespace=namespace)
    producer.declare_queue("q")
    ids = {name: producer.enqueue(name, args, queue="q") for name, args in CALLS}
    pool_log = tmp_path / "pool-parity.jsonl"
    pool = Pool(
        redis_server.url,
        namespace,
        tmp_path / "pool.log",
        "-c",
        "1",
        app="tests.apps.parity",
        env={"PARITY_LOG": str(pool_log)},
    )
    try:

        def all_ended() -> bool:
            infos = [producer.get_job(job_id, queue="q") for job_id in ids.values()]
            return all(info is not None and info.state in ENDED for info in infos)

        wait_until(all_ended, 60, "every job to end under the pool")
        assert pool.stop() == 0, pool.log()
    finally:
        pool.kill()
    pooled = (what_became(producer, ids), hook_calls(pool_log))
    producer.close()

    # what a pool did, spelled out once (the test modes are compared with it)
    states, calls = pooled
    never, refused = "ValueError: never works", "Fail: refused at once"
    assert states == {
        "value": ("done", 1, None, ("result", {"double": 42, "args": [21]})),
        "progress": ("done", 1, None, ("result", 1)),
        "flaky": ("done", 2, None, ("result", "k on attempt 2")),
        "doomed": ("dead", 2, "ValueError: never works", ("failed", "dead", never)),
        "refused": ("dead", 1, "Fail: refused at once", ("failed", "dead", refused)),
    }
    assert calls["flaky"] == [
        ["before", "flaky", 1, True],
        ["ran", "flaky", 1, "k"],
        ["failure", "flaky", 1, "retried"],
        ["after", "flaky", 1, "retried", "ConnectionError"],
        ["before", "flaky", 2, True],
        ["ran", "flaky", 2, "k"],
        ["after", "flaky", 2, "done", "NoneType"],
    ]
    assert calls["progress"][1] == ["progress", "progress", 1, "q"]
    assert stub == pooled
    assert eager == pooled
