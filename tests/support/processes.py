"""``fastq`` run as a user runs it: its command line in a subprocess, from the
repository root (so ``--app tests.apps.<name>`` imports), with the test server's URL.
A command run to its end (``run_cli``) is forked from a process that imported fastq
once (tests/support/zygote.py)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional

import orjson

ROOT = Path(__file__).resolve().parent.parent.parent


def fastq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastq", *args]


def subprocess_env(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, FASTQ_REDIS_URL=url, PYTHONPATH=str(ROOT), **extra)
    return env


def wait_while_working(
    url: str, wait_args: list[str], work: list[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``fastq wait`` with ``wait_args``, and ``work`` (a worker's command line) started
    only once the wait has read the queue and printed its first line, so that the
    drain it shows is the whole of it however fast the worker is. Returns the wait's
    result; asserts that the worker exited 0."""
    env = subprocess_env(url)
    waiting = subprocess.Popen(
        fastq_cmd("wait", *wait_args),
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert waiting.stdout is not None
        first = waiting.stdout.readline()  # printed (and flushed) after its first read
        worker = subprocess.Popen(work, env=env, stderr=subprocess.DEVNULL)
        try:
            rest, err = waiting.communicate(timeout=timeout)
        finally:
            assert worker.wait(timeout=timeout) == 0
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    return subprocess.CompletedProcess(waiting.args, waiting.returncode, first + rest, err)


def stop_process(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    """SIGTERM (if it still runs), then its exit status; killed if it outlives
    ``timeout_s``, and the timeout raised."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def run_cli(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m fastq ARGS`` with the test server's URL, to its end: its exit
    code, stdout and stderr, as ``subprocess.run`` gives them."""
    return _zygote().run(list(args), subprocess_env(url), timeout)


# what the zygote's imports may have read from the environment: a command with other
# values than the zygote's runs as a subprocess of its own; these two are not read
# at import (pytest sets the second at each test's every phase)
_PER_COMMAND = ("FASTQ_REDIS_URL", "PYTEST_CURRENT_TEST")


class _Zygote:
    def __init__(self) -> None:
        self.env = subprocess_env("")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote"],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.lock = threading.Lock()
        self.pending = b""  # what was read of the replies and not yet taken
        self.forked = 0  # the commands it ran (the others ran as subprocesses)

    def _same_imports(self, env: dict[str, str]) -> bool:
        def fixed(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k not in _PER_COMMAND}

        return fixed(env) == fixed(self.env)

    def _reply(self, timeout: Optional[float]) -> Optional[dict[str, Any]]:
        """The zygote's next reply line, or None when ``timeout`` passes first. Read
        from the pipe's fd unbuffered, so that select sees every line not yet read."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            if timeout is not None:
                ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
                if not ready:
                    return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the zygote (tests/support/zygote.py) died")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        reply: dict[str, Any] = orjson.loads(line)
        return reply

    def run(
        self, argv: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        cmd = fastq_cmd(*argv)
        if not self._same_imports(env):
            return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        with self.lock, tempfile.TemporaryDirectory(prefix="fastq-cli-") as tmp:
            out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            request = {"argv": argv, "env": env, "cwd": os.getcwd(), "stdout": out, "stderr": err}
            assert self.proc.stdin is not None
            self.proc.stdin.write(orjson.dumps(request) + b"\n")
            self.proc.stdin.flush()
            pid = self._reply(None)["pid"]  # type: ignore[index]
            self.forked += 1
            done = self._reply(timeout)
            if done is None:
                os.kill(pid, signal.SIGKILL)
                self._reply(None)
                raise subprocess.TimeoutExpired(cmd, timeout)
            with open(out, encoding="utf-8", errors="replace") as f:
                stdout = f.read()
            with open(err, encoding="utf-8", errors="replace") as f:
                stderr = f.read()
            code = os.waitstatus_to_exitcode(done["status"])
            return subprocess.CompletedProcess(cmd, code, stdout, stderr)


_the_zygote: Optional[_Zygote] = None


def _zygote() -> _Zygote:
    global _the_zygote
    if _the_zygote is None or _the_zygote.proc.poll() is not None:
        _the_zygote = _Zygote()
    return _the_zygote
