"""The throwaway redis-server the tests and `fastq demo` start."""

from __future__ import annotations

import socket

import pytest
import redis

from fastq.testing import redis_server
from fastq.testing.redis_server import RedisServer


def test_a_picked_port_taken_before_the_server_binds_it_is_picked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # tests run side by side: another process may bind the port free_port() returned
    with socket.socket() as squatter:  # bound, not listening: a connect is refused
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        real_free_port = redis_server.free_port
        monkeypatch.setattr(
            redis_server, "free_port", lambda: next(picks, None) or real_free_port()
        )
        with RedisServer() as server:
            assert server.port != taken
            assert redis.Redis(port=server.port).ping()


def test_a_port_asked_for_that_is_taken_is_an_error() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"did not start on port {taken}"):
            RedisServer(taken).start()
