"""The reaper's own bookkeeping on one Redis (its sweeps under faults are in
tests/fault: test_redis_down, test_cluster_leases)."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any, Optional

import pytest
import redis

import fastq
from fastq.reaper import reaper as reaper_module
from fastq.reaper.reaper import Reaper
from fastq.testing.redis_server import RedisServer
from tests.support.processes import fastq_cmd, subprocess_env


def test_the_last_queue_list_stands_while_it_cannot_be_read(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the list lives on one master: while that one does not answer,
    the queues on the others are swept all the same."""
    monkeypatch.setattr(reaper_module, "_QUEUES_REFRESH_S", 0.0)  # read at every sweep
    app.enqueue("send", queue="mail")
    client = app.new_client(retries=0)
    reaper = Reaper(app, handle_signals=False)
    reaper.sweep(client)
    assert reaper.queues(client) == ["mail"]

    def away(*args: Any, **kwargs: Any) -> list[str]:
        raise redis.ConnectionError("the master keeping the list does not answer")

    monkeypatch.setattr(app, "physical_queues_on", away)
    app.enqueue("send", queue="mail", delay_s=0.05)
    time.sleep(0.1)
    reaper.sweep(client)  # promotes the due job: "mail" is still swept
    stats = app.stats("mail")
    assert (stats["ready"], stats["scheduled"]) == (2, 0)
    with pytest.raises(redis.ConnectionError):  # no list read yet: nothing to sweep
        Reaper(app, handle_signals=False).sweep(client)
    client.close()


def _host_address() -> Optional[str]:
    """An IPv4 address of this host other than the loopback's, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: it picks the route's source
            address: str = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("refusal", ["protected mode", "password"])
def test_a_standalone_reaper_that_redis_refuses_exits_with_one_line(
    refusal: str, namespace: str
) -> None:
    if refusal == "protected mode":
        # no password: Redis takes only loopback connections, and this one is not
        address = _host_address()
        if address is None:
            pytest.skip("this host has no address but the loopback's")
        server = RedisServer(extra_args=["--bind", "127.0.0.1", address, "--protected-mode", "yes"])
        url_host = address
    else:
        server = RedisServer(extra_args=["--requirepass", "s3cret"])
        url_host = "127.0.0.1"
    server.start()
    try:
        url = f"redis://{url_host}:{server.port}/0"
        proc = subprocess.run(
            fastq_cmd("reaper", "--app", "tests.apps.counting", "--namespace", namespace),
            env=subprocess_env(url), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        server.cleanup()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fastq: error:")]
    assert len(errors) == 1, proc.stderr
    expected = "protected mode" if refusal == "protected mode" else "check the user and password"
    assert f"Redis at redis://{url_host}:{server.port}/0 refused the connection" in errors[0]
    assert expected in errors[0], errors[0]
