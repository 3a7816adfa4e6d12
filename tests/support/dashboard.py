"""The dashboard's browser tests: a ``fastq pool`` of ``tests.apps.dash_jobs``, the
system Chromium driven by Playwright (never a downloaded browser), screenshots."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import psutil

from tests.support.pool import wait_until
from tests.support.processes import ROOT, fastq_cmd, stop_process, subprocess_env
from tests.support.serve import TOKEN, Server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "build" / "screenshots"
APP = "tests.apps.dash_jobs"


class DashPool:
    """``fastq pool --app tests.apps.dash_jobs`` on the test's namespace."""

    def __init__(self, url: str, namespace: str, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                fastq_cmd("pool", "--app", APP, "--namespace", namespace, *args),
                env=subprocess_env(url),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def children(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [k for k in kids if _named(k, "fastq-worker")]

    def wait_children(self, n: int, timeout_s: float = 20) -> list[psutil.Process]:
        wait_until(lambda: len(self.children()) == n, timeout_s, f"{n} worker children")
        return self.children()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 30) -> int:
        return stop_process(self.proc, timeout_s)


def _named(proc: psutil.Process, name: str) -> bool:
    try:
        return proc.name() == name and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def screenshot(page: Any, name: str) -> None:
    """Keep what the page shows now, for a person to look at (build/screenshots/)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def log_in(page: Any, server: Server, path: str = "/") -> None:
    """Log in through the form, as a person does, and land on ``path``."""
    page.goto(server.base_url + path)
    page.fill("#token", TOKEN)
    page.click("#login")
    page.wait_for_url(server.base_url + path)


class PrefixProxy:
    """A reverse proxy on a free port of loopback that serves ``upstream`` under
    ``prefix`` (``/fastq/queues`` -> ``/queues``), as nginx's ``location /fastq/ {
    proxy_pass http://upstream/; }`` does; redirects and cookies pass as they are."""

    def __init__(self, upstream: str, prefix: str) -> None:
        import http.server
        import threading

        import httpx

        client = httpx.Client(base_url=upstream, timeout=10, follow_redirects=False)

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                if not self.path.startswith(prefix + "/"):
                    self.send_error(404, "not under the prefix")
                    return
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                reply = client.request(
                    self.command, self.path[len(prefix) :], content=body, headers=headers
                )
                self.send_response(reply.status_code)
                for name, value in reply.headers.multi_items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self._client = client

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._client.close()
