"""A new user's first hour: the README's first job, verbatim, in a fresh shell with
the app's Redis on a port of its own, and the one-line answers to what a new user
gets wrong (a queue read on the wrong Redis, a file for --app, a pipe closed early,
a database that does not exist)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.processes import ROOT, fastq_cmd, subprocess_env

README = ROOT / "README.md"


def _first_job() -> tuple[str, list[str]]:
    """The README's "A first job": the code of myapp.py and its shell commands."""
    section = README.read_text().split("## A first job", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    assert code and shell, "the README's first job lost its code blocks"
    commands = [line.split("#", 1)[0].strip() for line in shell.group(1).splitlines()]
    return code.group(1), [c for c in commands if c]


def _fresh_shell_env() -> dict[str, str]:
    """A new shell's environment: no FASTQ_* variables, the venv's commands first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTQ_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.timeout(180)
def test_the_readme_first_job_works_verbatim_on_the_apps_own_redis(tmp_path: Path) -> None:
    code, commands = _first_job()
    assert commands[0] == "python myapp.py" and commands[1].startswith("fastq pool --app myapp")
    server = RedisServer().start()
    try:
        # the one change a user makes: where their Redis is
        default = "redis://127.0.0.1:6379/0"
        assert default in code
        (tmp_path / "myapp.py").write_text(code.replace(default, server.url))
        env = _fresh_shell_env()

        def run(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                shlex.split(command),
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        enqueued = run(commands[0])
        assert enqueued.returncode == 0, enqueued.stderr
        first_id = enqueued.stdout.strip()
        # the pool in the first shell: its prints go to a pipe, as under systemd
        with open(tmp_path / "pool.out", "w") as out, open(tmp_path / "pool.err", "w") as err:
            pool = subprocess.Popen(
                shlex.split(commands[1]),
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                for command in commands[2:]:  # wait, then stats, in another shell
                    proc = run(command)
                    assert proc.returncode == 0, f"{command}: {proc.stderr}"
                    if command.startswith("fastq stats"):
                        assert " enqueued=10001 processed=10001 failed=0 cancelled=0 " in (
                            proc.stdout
                        ), proc.stdout
                    else:
                        # it counts from when it starts: the pool has begun by then
                        assert re.search(
                            r"mailer drained: \d+ done, 0 failed, 0 dead\n$", proc.stdout
                        ), proc.stdout
                inspected = run(f"fastq inspect {first_id} --app myapp")
                assert inspected.returncode == 0 and "done" in inspected.stdout, inspected.stderr
            finally:
                os.killpg(pool.pid, signal.SIGINT)  # Ctrl-C in a terminal
                assert pool.wait(timeout=60) == 0
        # one line per print, whole, though two children printed into one pipe
        lines = (tmp_path / "pool.out").read_text().splitlines()
        assert len(lines) == 10_001
        assert [x for x in lines if not re.fullmatch(r"sending .hi. to \S+@example\.com", x)] == []
        log = (tmp_path / "pool.err").read_text()
        assert "a second Ctrl-C or SIGTERM stops them at once" in log, log
    finally:
        server.stop()


def test_a_queue_read_on_another_redis_names_it_and_suggests_app(
    redis_server: RedisServer, app: fastq.App
) -> None:
    url = redis_server.url
    for command in (["stats", "-q", "mailer"], ["wait", "-q", "mailer"]):
        proc = subprocess.run(
            fastq_cmd(*command, "--namespace", app.namespace),
            env=subprocess_env(url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            f"fastq: error: unknown queue 'mailer' on {url}, namespace {app.namespace!r}"
            + (
                " (known: none)"
                if command[0] == "stats"
                else ": no job was ever enqueued on it and no job of this app is registered on it "
                "(known: none)"
            )
            + "; without --app this command reads $FASTQ_REDIS_URL: add --app MODULE to "
            "read the app's"
        ]


def test_a_closed_pipe_and_an_empty_listing_are_quiet(
    redis_server: RedisServer, app: fastq.App
) -> None:
    app.enqueue_many("flaky", [(i,) for i in range(20_000)], queue="mailer", tags=["blast"])
    fastq_line = shlex.join(fastq_cmd("jobs", "--tag", "blast", "--namespace", app.namespace))
    proc = subprocess.run(
        ["bash", "-c", f"{fastq_line} | head -1"],
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    assert re.fullmatch(r"\S+ mailer queued\n", proc.stdout)
    proc = subprocess.run(
        fastq_cmd("jobs", "--tag", "nosuch", "--namespace", app.namespace),
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr == (
        f"fastq: no live job tagged 'nosuch' on any queue of {redis_server.url}, "
        f"namespace {app.namespace!r}\n"
    )


def test_a_database_that_does_not_exist_is_one_line_and_a_refusal(
    redis_server: RedisServer,
) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/99"
    proc = subprocess.run(
        fastq_cmd("stats", "--redis-url", url),
        env=subprocess_env(url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"fastq: error: Redis at {url} refused the call (no such database): "
        "DB index is out of range\n"
    )
    app = fastq.App(url)
    with pytest.raises(fastq.RedisRefused, match="no such database") as caught:
        app.enqueue("anything", [], queue="q")
    assert caught.value.fault == "no such database"


def test_with_app_a_command_reads_the_apps_redis_whatever_the_environment(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # an app that names its Redis, run from a shell whose $FASTQ_REDIS_URL is another
    # project's (here: a port nothing listens on)
    (tmp_path / "named.py").write_text(
        "import fastq\n"
        f"app = fastq.App({redis_server.url!r}, namespace='named')\n"
        "@app.job(queue='mailer')\n"
        "def send(to: str) -> None: ...\n"
    )
    env = dict(_fresh_shell_env(), FASTQ_REDIS_URL="redis://127.0.0.1:1/0")

    def fastq_line(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["fastq", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    proc = fastq_line("enqueue", "send", "--app", "named", "--args", '["a@example.com"]')
    assert proc.returncode == 0, proc.stderr
    proc = fastq_line("stats", "--app", "named", "-q", "mailer")
    assert proc.returncode == 0 and "mailer ready=1 " in proc.stdout, proc.stderr
    # an explicit --redis-url still says where
    proc = fastq_line("stats", "--app", "named", "--redis-url", "redis://127.0.0.1:1/0")
    assert proc.returncode == 1 and "cannot reach Redis at redis://127.0.0.1:1/0" in proc.stderr
