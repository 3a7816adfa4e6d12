"""``fastq serve`` as a user runs it: a subprocess on a free port of loopback, its
log in a file, and an httpx client that carries its token."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Optional

import httpx

from tests.support.pool import wait_until
from tests.support.processes import fastq_cmd, stop_process, subprocess_env

TOKEN = "test-token-0123456789abcdef"
_LISTENING = re.compile(r"fastq serve: listening on (https?)://(\S+):(\d+) ")


class Server:
    """A ``fastq serve`` subprocess (``args``: its options after ``serve``)."""

    def __init__(
        self, url: str, log_path: Path, *args: str, token: Optional[str] = TOKEN, **env: str
    ) -> None:
        self.log_path = log_path
        self.token = token
        extra = dict(env)
        if token is not None:
            extra["FASTQ_TOKEN"] = token
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                fastq_cmd("serve", "--port", "0", *args),
                env=subprocess_env(url, **extra),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.port = 0

    def started(self, timeout_s: float = 20) -> Server:
        """Wait for its start-up line (the port it bound)."""

        def listening() -> bool:
            found = _LISTENING.search(self.log())
            if found is None:
                assert self.proc.poll() is None, f"fastq serve exited:\n{self.log()}"
                return False
            self.port = int(found.group(3))
            return True

        wait_until(listening, timeout_s, "fastq serve to listen")
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: Optional[str] = "", **kwargs: Any) -> httpx.Client:
        """A client of the API, as docs/http.md writes one: with its token unless
        ``token`` says another (None: none), and ``Content-Type: application/json`` on
        every request (the API refuses a POST, PUT or DELETE without it)."""
        given = self.token if token == "" else token
        headers = {"Content-Type": "application/json"}
        if given is not None:
            headers["Authorization"] = f"Bearer {given}"
        headers.update(kwargs.pop("headers", {}))
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float = 20) -> int:
        """Its exit status (for one that should exit by itself)."""
        return self.proc.wait(timeout=timeout_s)

    def stop(self, timeout_s: float = 20) -> int:
        return stop_process(self.proc, timeout_s)


class Servers:
    """``fastq serve`` subprocesses of one test, in its namespace, each logging to a
    file of its own; :meth:`stop_all` stops them (a fixture's teardown)."""

    def __init__(self, url: str, namespace: str, tmp_path: Path) -> None:
        self.url = url
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.started: list[Server] = []

    def start(self, *args: str, wait: bool = True, **kwargs: Any) -> Server:
        """A server with ``args`` after ``serve``; ``wait``: until it listens."""
        log = self.tmp_path / f"serve{len(self.started)}.log"
        server = Server(self.url, log, "--namespace", self.namespace, *args, **kwargs)
        self.started.append(server)
        return server.started() if wait else server

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()


def keys_of(r: Any, namespace: str) -> list[bytes]:
    """Every key of a test's namespace, sorted: what a refused call must leave alone."""
    return sorted(r.scan_iter(f"{namespace}:*"))
