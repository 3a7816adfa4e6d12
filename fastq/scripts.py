"""The Lua scripts, loaded once per connection and sent as raw EVALSHA.

redis-py's ``Script`` objects send an extra ``SCRIPT EXISTS`` round trip on every
pipeline ``execute()``; sending EVALSHA ourselves and reloading only on
NOSCRIPT (after ``SCRIPT FLUSH`` or a Redis restart) avoids it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence, Union

import redis
from redis.exceptions import NoScriptError

Command = tuple[Union["Script", "Plain"], Sequence[Any], Sequence[Any]]


@dataclass(frozen=True)
class Script:
    name: str
    source: bytes
    sha: str

    @classmethod
    def from_package(cls, name: str) -> Script:
        """Read ``lua/<name>.lua``; each leading ``--! include X`` line pulls in
        ``lua/lib/X.lua`` ahead of it (helpers shared by several verbs). A first
        line ``#!lua flags=...`` (Redis 7 script flags) stays the first line."""
        lua = resources.files("fastq").joinpath("lua")
        body = lua.joinpath(f"{name}.lua").read_bytes()
        shebang: list[bytes] = []
        if body.startswith(b"#!"):
            first, _, body = body.partition(b"\n")
            shebang.append(first)
        parts = []
        for line in body.splitlines():
            if not line.startswith(b"--! include "):
                break
            lib = line.split()[-1].decode()
            parts.append(lua.joinpath("lib", f"{lib}.lua").read_bytes())
        source = b"\n".join([*shebang, *parts, body])
        return cls(name, source, hashlib.sha1(source).hexdigest())

    def args(self, keys: Sequence[Any], argv: Sequence[Any]) -> list[Any]:
        """The arguments of an EVALSHA of this script."""
        return ["EVALSHA", self.sha, len(keys), *keys, *argv]


@dataclass(frozen=True)
class Plain:
    """A plain Redis command in a worker's round trip (its whole command in the
    ARGV place, no KEYS): for writes that need no script, such as keeping a result."""

    name: str = "plain"

    def args(self, keys: Sequence[Any], argv: Sequence[Any]) -> list[Any]:
        return [*keys, *argv]


PLAIN = Plain()

# Every script in lua/; each one's KEYS, ARGV and reply are declared in contracts.py
NAMES = (
    "enqueue", "claim", "ack", "release", "reap", "extend", "fire", "purge", "take", "ack_taken",
    "rate_take", "cancel", "revive",
)  # fmt: skip
ALL = tuple(Script.from_package(name) for name in NAMES)
BY_NAME = {script.name: script for script in ALL}


def load_all(client: redis.Redis) -> None:
    """Load every script into the server ``client`` talks to, in one round trip.

    Done when a client is made, so that a first pipelined blast is not answered
    NOSCRIPT chunk after chunk and sent twice.
    """
    pipe = client.pipeline(transaction=False)
    for script in ALL:
        pipe.script_load(script.source)
    pipe.execute()


def call(client: redis.Redis, script: Script, keys: Sequence[Any], argv: Sequence[Any]) -> Any:
    """Run one script; on NOSCRIPT load the scripts and send it once more."""
    try:
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
    except NoScriptError:
        load_all(client)
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]


def call_many(
    client: redis.Redis, commands: Sequence[Command], *, raise_on_error: bool = True
) -> list[Any]:
    """Send several script calls in one pipelined round trip; return their replies.

    A command answered NOSCRIPT did not run, so after loading the scripts only
    those are sent again. Any other error reply is raised, or with
    ``raise_on_error=False`` returned in its command's place (a producer needs to
    know which chunks of a blast went in).
    """
    pipe = client.pipeline(transaction=False)
    for script, keys, argv in commands:
        pipe.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
    results: list[Any] = pipe.execute(raise_on_error=False)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        load_all(client)
        pipe = client.pipeline(transaction=False)
        for i in missing:
            script, keys, argv = commands[i]
            pipe.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
        for i, reply in zip(missing, pipe.execute(raise_on_error=False)):
            results[i] = reply
    if raise_on_error:
        for reply in results:
            if isinstance(reply, Exception):
                raise reply
    return results
