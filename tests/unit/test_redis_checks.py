"""The start-up checks' verdicts, on replies a test server cannot give (an old
Redis, a managed one that refuses CONFIG)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis import exceptions as rex

from fastq.connection.checks import _check_config, _check_version


def test_an_old_redis_is_named_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fastq.redis")
    _check_version("worker", "redis://:***@h/0", "6.2.14")
    _check_version("worker", "redis://:***@h/0", "7.0.15")
    _check_version("worker", "redis://:***@h/0", "7.2.4")
    assert [r.getMessage() for r in caplog.records] == [
        "worker: Redis at redis://:***@h/0 is 6.2.14, older than 7.0: fastq's scripts use "
        "script flags (#!lua) and LMPOP, new in Redis 7.0"
    ]


class _Refusing:
    def config_get(self, name: str) -> Any:
        raise rex.ResponseError("unknown command 'CONFIG', with args beginning with: 'GET'")


class _Config:
    def __init__(self, **values: str) -> None:
        self.values = {k.replace("_", "-"): v for k, v in values.items()}

    def config_get(self, name: str) -> dict[str, str]:
        return {name: self.values[name]}


def test_a_refused_config_get_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fastq.redis")
    _check_config("master 1", "redis://h/0", _Refusing())
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",
            "master 1: could not check Redis' eviction and persistence settings: "
            "unknown command 'CONFIG', with args beginning with: 'GET'",
        ),
    ]


@pytest.mark.parametrize(
    ("policy", "aof", "save", "warned"),
    [
        ("noeviction", "yes", "", []),
        ("noeviction", "no", "3600 1 300 100", []),
        ("noeviction", "no", "", ["persists nothing"]),
        ("volatile-lru", "yes", "", ["maxmemory-policy volatile-lru"]),
        ("allkeys-lru", "no", "", ["maxmemory-policy allkeys-lru", "persists nothing"]),
    ],
)
def test_the_settings_that_can_lose_jobs_are_warned(
    caplog: pytest.LogCaptureFixture, policy: str, aof: str, save: str, warned: list[str]
) -> None:
    caplog.set_level(logging.INFO, "fastq.redis")
    client = _Config(maxmemory_policy=policy, appendonly=aof, save=save)
    _check_config("worker", "redis://h/0", client)
    messages = [r.getMessage() for r in caplog.records]
    assert all(r.levelname == "WARNING" for r in caplog.records)
    assert len(messages) == len(warned)
    for message, part in zip(messages, warned):
        assert part in message
