"""A throwaway ``redis-server`` on a free loopback port, in a temp dir.

Used by ``fastq demo`` when no Redis is given, by the test suite and by the
benchmarks; it never touches a Redis it did not start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Optional

import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Start with ``start()`` (or as a context manager); ``url`` points at it.

    Args:
        port: a free one is picked when None; ``restart()`` keeps it.
        appendonly: persist every write (``appendfsync always``) so a kill -9
            loses nothing that was acknowledged.
        extra_args: more ``redis-server`` options, e.g. ``["--requirepass", "x"]``.
    """

    def __init__(
        self,
        port: Optional[int] = None,
        *,
        appendonly: bool = False,
        extra_args: Optional[list[str]] = None,
        executable: str = "redis-server",
    ) -> None:
        path = shutil.which(executable)
        if path is None:
            raise RuntimeError(
                f"{executable} not found: install it (e.g. `apt-get install redis-server`) "
                "or pass --redis-url"
            )
        self.executable = path
        self.port = port or free_port()
        self.appendonly = appendonly
        self.extra_args = list(extra_args or [])
        self.dir = tempfile.mkdtemp(prefix="fastq-redis-")
        self.process: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        args = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--daemonize", "no",
            "--logfile", os.path.join(self.dir, "redis.log"),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        password = self._password()
        while True:
            try:
                client = redis.Redis(port=self.port, password=password, socket_connect_timeout=0.2)
                client.ping()
                client.close()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"redis-server did not start on port {self.port}: {self.log_tail()}"
                    ) from None
                time.sleep(0.02)

    def _password(self) -> Optional[str]:
        if "--requirepass" in self.extra_args:
            return self.extra_args[self.extra_args.index("--requirepass") + 1]
        return None

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "redis.log"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server: whatever was not persisted is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        """Kill and start again on the same port and data dir."""
        self.kill()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.cleanup()
