"""``fastq serve``'s app (``create_app``, its token and guard included) served for
real: uvicorn on a free loopback port, in a thread of the test's process, over a
fastq App of the test's server and namespace (an app the test may register jobs in;
``tests.support.serve`` runs the ``fastq serve`` command itself)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Optional

import httpx
import uvicorn

import fastq
from fastq.serve.app import create_app
from tests.support.serve import TOKEN


class ServedWorkers:
    """``create_app(app, TOKEN)`` served by uvicorn until :meth:`stop`; :attr:`url`
    is where."""

    def __init__(self, app: fastq.App) -> None:
        self.asgi = create_app(app, TOKEN)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.asgi, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread: Optional[threading.Thread] = None

    def start(self) -> ServedWorkers:
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped at start"
            assert time.monotonic() < deadline, "uvicorn did not start within 15 s"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(15)
        self.sock.close()

    def client(self) -> httpx.Client:
        """A client that carries the token."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def post(client: httpx.Client, path: str, body: Any) -> tuple[int, Any]:
    """POST ``body`` as JSON: the status and the decoded reply."""
    response = client.post(path, json=body)
    return response.status_code, response.json()
