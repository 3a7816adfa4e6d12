"""fastq's test mode, as a user's own test suite uses it: app.stub() and app.eager()
with no Redis at all; what goes through is what the real path checks and encodes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fastq
from tests.support.processes import ROOT, subprocess_env


def test_a_users_suite_passes_in_test_mode_without_redis() -> None:
    # the app's Redis is a port nothing listens on: any Redis call would fail
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(ROOT / "tests" / "apps" / "shop_suite.py"),
        ],
        env=subprocess_env("redis://127.0.0.1:1/0"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


def test_what_a_job_receives_came_through_json_and_bad_input_is_refused() -> None:
    app = fastq.App("redis://127.0.0.1:1/0")
    got: list[object] = []

    @app.job(queue="q")
    def job(items: object, when: object = None) -> None:
        got.append((items, when))

    with app.stub() as jobs:
        job_id = job.enqueue_with(delay_s=60, tags=["t"])((1, 2), when=3)
        with pytest.raises(TypeError, match="args do not fit|missing a required argument"):
            job.enqueue()
        with pytest.raises(ValueError, match="over the limit"):
            job.enqueue("x" * (app.max_payload_bytes + 1))
        with pytest.raises(fastq.UnknownQueue, match="'qq'"):
            app.enqueue("job", [1], queue="qq")
        ids = job.enqueue_many([((1,),), ((2,),)])
    assert [j.id for j in jobs] == [job_id, *ids]
    first = jobs[0]
    assert (first.args, first.kwargs, first.tags) == ([[1, 2]], {"when": 3}, ("t",))
    assert first.due_at is not None
    jobs.run()
    assert got == [([1, 2], 3), ([1], None), ([2], None)]  # a tuple arrives as a list
    # outside the block, the app talks to Redis again
    with pytest.raises(fastq.RedisUnavailable):
        job.enqueue(1)


def test_eager_propagates_a_jobs_error_to_the_enqueue() -> None:
    app = fastq.App("redis://127.0.0.1:1/0")

    @app.job(queue="q")
    def boom(n: int) -> None:
        raise RuntimeError(f"boom {n}")

    with app.eager(), pytest.raises(RuntimeError, match="boom 3"):
        boom.enqueue(3)
