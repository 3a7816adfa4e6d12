"""The peer harness's batched counting (``bench/peers/drivers/counting.py``): a
worker process's runs reach Redis without a round trip per job, yet every run is
counted, whether the process lives on (the flusher sends within 20 ms), exits,
or ends by ``os._exit`` as forked children and RQ's work horse do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

from fastq.testing.redis_server import RedisServer

DRIVERS = Path(__file__).resolve().parent.parent.parent / "bench" / "peers" / "drivers"

# jobs 0..N-1 run once, job 7 once more (a duplicate); then the process ends as told
WORKER = """
import os, sys, time
from counting import record
n, ending = int(sys.argv[1]), sys.argv[2]
if ending == "fork":  # the jobs run in a forked child that ends by os._exit
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        sys.exit(0)
for i in list(range(n)) + [7]:
    record(i)
if ending == "linger":  # stays up: the flusher alone must send them
    time.sleep(60)
elif ending in ("os_exit", "fork"):
    os._exit(0)
"""


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_server.url)
    c.delete("peerbench:count", "peerbench:seen")
    yield c
    c.delete("peerbench:count", "peerbench:seen")
    c.close()


def run_worker(url: str, n: int, ending: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PEERBENCH_URL": url, "PYTHONPATH": str(DRIVERS)}
    return subprocess.Popen([sys.executable, "-c", WORKER, str(n), ending], env=env)


def counted(client: redis.Redis) -> tuple[int, int]:
    return int(client.get("peerbench:count") or 0), int(client.bitcount("peerbench:seen"))


@pytest.mark.parametrize("ending", ["exit", "os_exit", "fork"])
def test_every_run_is_counted_when_the_process_ends(
    client: redis.Redis, redis_server: RedisServer, ending: str
) -> None:
    n = 250  # two full batches and a partial one
    proc = run_worker(redis_server.url, n, ending)
    assert proc.wait(timeout=30) == 0
    assert counted(client) == (n + 1, n)  # one duplicate, no loss


def test_the_flusher_sends_a_partial_batch_of_a_live_process(
    client: redis.Redis, redis_server: RedisServer
) -> None:
    """The harness waits for the counter to reach N while the workers are still up."""
    n = 42  # under one batch: only the flusher's deadline sends it
    proc = run_worker(redis_server.url, n, "linger")
    try:
        deadline = time.monotonic() + 20
        while counted(client) != (n + 1, n) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counted(client) == (n + 1, n)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
