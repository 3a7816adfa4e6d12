"""`fastq pool --reload`: a change to the app's source restarts the children on the
new code, without a signal from anyone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis

from fastq.testing.redis_server import RedisServer
from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, subprocess_env

APP = """
import os
import fastq

app = fastq.App(os.environ["FASTQ_REDIS_URL"], namespace=os.environ["NS"])


@app.job(queue="q")
def version() -> None:
    app.redis.rpush(f"{app.namespace}:ran", "VERSION")
"""


@pytest.mark.timeout(120)
def test_a_changed_app_file_restarts_the_children_on_the_new_code(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    source = tmp_path / "reloadapp.py"
    source.write_text(APP.replace("VERSION", "1"))
    env = subprocess_env(redis_server.url, NS=namespace)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the app's bytecode is cached, as by default
    ran = f"{namespace}:ran"

    def logged() -> str:
        return (tmp_path / "pool.log").read_text()

    def enqueue_and_run() -> bytes:
        subprocess.run(
            fastq_cmd("enqueue", "version", "--app", "reloadapp"),
            cwd=tmp_path,
            env=env,
            check=True,
            timeout=60,
        )
        reply = r.blpop([ran], timeout=30)
        assert reply is not None, logged()
        return bytes(reply[1])

    with open(tmp_path / "pool.log", "w") as log:
        command = fastq_cmd("pool", "--app", "reloadapp", "-c", "1", "--reload")
        pool = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
        try:
            wait_until(lambda: "watching" in logged(), 30, "the watch")
            assert enqueue_and_run() == b"1"
            # an edit of the same size within the second of the last compile: Python
            # would take the cached bytecode for current (it compares whole seconds)
            first = source.stat()
            source.write_text(APP.replace("VERSION", "2"))
            os.utime(source, ns=(first.st_atime_ns, first.st_mtime_ns))
            wait_until(lambda: "reloadapp.py changed; reloading" in logged(), 30, "the reload")
            # an old child finishing its batch may still run one: until the new one does
            got = [enqueue_and_run()]
            while got[-1] != b"2" and len(got) < 50:
                got.append(enqueue_and_run())
            assert got[-1] == b"2", logged()
        finally:
            pool.terminate()
            assert pool.wait(timeout=60) == 0
