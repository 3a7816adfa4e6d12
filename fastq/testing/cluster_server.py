"""A throwaway Redis Cluster on loopback ports, in temp dirs.

For the test suite and the benchmarks, as :class:`fastq.testing.redis_server.RedisServer` is
for one server: ``masters`` servers with ``--cluster-enabled yes`` (and
``replicas`` replicas of each), joined by ``redis-cli --cluster create``, stopped by
their processes. It never touches a Redis it did not start.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from types import TracebackType
from typing import Any, Optional

import redis

from fastq.testing.redis_server import RedisServer

# A node's cluster bus listens on its port + 10000, and ports above 65535 do not exist
MAX_PORT = 55535
BUS_OFFSET = 10000
_FIRST_PORT = 20000


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: frozenset[int] = frozenset()) -> int:
    """A free loopback port <= ``MAX_PORT`` whose bus port (+10000) is free too.

    Random rather than the kernel's pick: an ephemeral port is often above 55535.
    """
    for _ in range(1000):
        port = random.randint(_FIRST_PORT, MAX_PORT)
        if port in taken or port + BUS_OFFSET in taken:
            continue
        if _bindable(port) and _bindable(port + BUS_OFFSET):
            return port
    raise RuntimeError(f"no free port pair (P, P+{BUS_OFFSET}) with P <= {MAX_PORT}")


class ClusterServer:
    """Start with ``start()`` (or as a context manager); ``url`` points at it.

    Args:
        masters: master nodes (3 at least: redis-cli refuses fewer).
        replicas: replicas of each master.
        password: set as ``requirepass`` and ``masterauth`` of every node.
        node_timeout_ms: ``cluster-node-timeout``: how long a master may be
            unreachable before its replica takes over.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        *,
        password: Optional[str] = None,
        node_timeout_ms: int = 2000,
    ) -> None:
        if masters < 3:
            raise ValueError(f"a Redis Cluster needs 3 masters at least, not {masters}")
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError(
                "redis-cli not found: install it (e.g. `apt-get install redis-tools`)"
            )
        self.cli = cli
        self.masters = masters
        self.replicas = replicas
        self.password = password
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"redis+cluster://{auth}{hosts}"

    def client(self, port: int) -> redis.Redis:
        """A plain client of one node (for CLUSTER INFO, MONITOR, DEBUG...)."""
        return redis.Redis(port=port, password=self.password, socket_connect_timeout=1.0)

    def start(self, timeout_s: float = 30.0) -> ClusterServer:
        try:
            self._start_nodes()
            self._create(timeout_s)
            self.wait_ok(timeout_s)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _start_nodes(self) -> None:
        taken: set[int] = set()
        for _ in range(self.masters * (1 + self.replicas)):
            for attempt in range(3):
                port = free_cluster_port(frozenset(taken))
                pw = self.password
                auth = ["--requirepass", pw, "--masterauth", pw] if pw else []
                node = RedisServer(
                    port,
                    extra_args=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        str(self.node_timeout_ms),
                        *auth,
                    ],
                )
                try:
                    node.start()
                except RuntimeError:
                    # another process took the port between the check and the start
                    node.cleanup()
                    if attempt == 2:
                        raise
                    continue
                taken.update((port, port + BUS_OFFSET))
                self.nodes.append(node)
                break

    def _create(self, timeout_s: float) -> None:
        args = [
            self.cli,
            "--cluster",
            "create",
            *(f"127.0.0.1:{port}" for port in self.ports),
            "--cluster-replicas",
            str(self.replicas),
            "--cluster-yes",
        ]
        if self.password:
            args[1:1] = ["-a", self.password, "--no-auth-warning"]
        done = subprocess.run(args, capture_output=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed ({done.returncode}): "
                f"{done.stdout.decode(errors='replace')[-2000:]}"
                f"{done.stderr.decode(errors='replace')[-2000:]}"
            )

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Return once every node says ``cluster_state:ok`` and knows every other one
        (and each replica is in sync with its master)."""
        deadline = time.monotonic() + timeout_s
        while not self._whole():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster on ports {self.ports} did not come up")
            time.sleep(0.05)

    def _whole(self) -> bool:
        total = len(self.nodes)
        for port in self.ports:
            client = self.client(port)
            try:
                # Any: redis-py 7 types a reply as Awaitable | Any
                info: Any = client.cluster("INFO")
                if isinstance(info, bytes):
                    info = info.decode()
                if isinstance(info, str):  # redis-py parses it into a dict
                    info = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
                if str(info.get("cluster_state")) != "ok":
                    return False
                if int(info.get("cluster_known_nodes", 0)) != total:
                    return False
                replication: Any = client.info("replication")
                if replication.get("role") == "slave" and (
                    replication.get("master_link_status") != "up"
                ):
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
        self.nodes = []

    def __enter__(self) -> ClusterServer:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.cleanup()
