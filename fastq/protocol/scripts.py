"""The Lua scripts, loaded once per connection and sent as raw EVALSHA.

redis-py's ``Script`` objects send an extra ``SCRIPT EXISTS`` round trip on every
pipeline ``execute()``; sending EVALSHA ourselves and reloading only on
NOSCRIPT (after ``SCRIPT FLUSH`` or a Redis restart) avoids it.

On a Redis Cluster the scripts are loaded on every master, and each EVALSHA of a
pipeline is sent to the master of its first key's slot (every key of a call shares
the queue's hash tag). The node is named to the cluster pipeline: left to find it,
redis-py asks a node for the keys of each EVALSHA (``COMMAND GETKEYS``, the whole
call sent twice). A NOSCRIPT (a promoted replica, a new node) reloads that node.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence, Union

import redis
from redis.exceptions import NoScriptError

from fastq.connection import cluster

Command = tuple[Union["Script", "Plain", "OnNodeOf"], Sequence[Any], Sequence[Any]]


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
        lua = resources.files("fastq.protocol").joinpath("lua")
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


@dataclass(frozen=True)
class OnNodeOf:
    """A plain command without a key (``TIME``) in a worker's round trip, sent on a
    cluster to the node of its KEYS' first key: its KEYS only route it."""

    name: str = "on-node-of"

    def args(self, keys: Sequence[Any], argv: Sequence[Any]) -> list[Any]:
        return list(argv)


ON_NODE_OF = OnNodeOf()

# Every script in lua/; each one's KEYS, ARGV and reply are declared in contracts.py
NAMES = (
    "enqueue", "claim", "ack", "release", "reap", "extend", "fire", "purge", "take", "ack_taken",
    "rate_take", "cancel", "revive",
)  # fmt: skip
ALL = tuple(Script.from_package(name) for name in NAMES)
BY_NAME = {script.name: script for script in ALL}


def load_all(client: redis.Redis) -> None:
    """Load every script into the server ``client`` talks to (every master of a
    cluster), in one round trip per server.

    Done when a client is made, so that a first pipelined blast is not answered
    NOSCRIPT chunk after chunk and sent twice.
    """
    if cluster.is_cluster(client):
        for node in cluster.primaries(client):
            load_all(node)
        return
    # A small command first: a Redis that wants a password answers it NOAUTH, but
    # closes on a client that sends an unauthenticated bulk over 16 KB (the claim
    # script's source is 17 KB), which reads as "cannot reach Redis", not "access
    # denied". redis-py 8 learns it at connect (HELLO); redis-py 7 (the newest for
    # Python 3.9) sends nothing at connect.
    client.ping()
    pipe = client.pipeline(transaction=False)
    for script in ALL:
        pipe.script_load(script.source)
    pipe.execute()


def _reload(client: redis.Redis, first_keys: Sequence[Any]) -> None:
    """Load the scripts again where a call was answered NOSCRIPT: on a cluster, the
    masters of those calls' keys, as the slot map has them now."""
    if cluster.is_cluster(client) and None not in first_keys:
        for node in cluster.masters_of(client, first_keys):
            load_all(node)
    else:
        load_all(client)  # a call without keys may have run on any node


def call(client: redis.Redis, script: Script, keys: Sequence[Any], argv: Sequence[Any]) -> Any:
    """Run one script; on NOSCRIPT load the scripts and send it once more."""
    try:
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
    except NoScriptError:
        _reload(client, [keys[0] if keys else None])
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]


def _pipeline(client: redis.Redis, commands: Sequence[Command]) -> Any:
    """A pipeline of ``commands``; on a cluster each script call names its node."""
    pipe: Any = client.pipeline(transaction=False)
    rc = client if cluster.is_cluster(client) else None
    for script, keys, argv in commands:
        args = script.args(keys, argv)
        if rc is not None and keys and isinstance(script, Script):
            pipe.execute_command(*args, target_nodes=cluster.node_of(rc, keys[0]))
        else:
            pipe.execute_command(*args)
    return pipe


def call_many(
    client: redis.Redis, commands: Sequence[Command], *, raise_on_error: bool = True
) -> list[Any]:
    """Send several script calls in one pipelined round trip (one per node of a
    cluster, written to all before any reply is read); return their replies.

    A command answered NOSCRIPT did not run, so after loading the scripts only
    those are sent again. Any other error reply is raised, or with
    ``raise_on_error=False`` returned in its command's place (a producer needs to
    know which chunks of a blast went in).
    """
    results: list[Any] = _pipeline(client, commands).execute(raise_on_error=False)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        _reload(client, [commands[i][1][0] if commands[i][1] else None for i in missing])
        again = _pipeline(client, [commands[i] for i in missing])
        for i, reply in zip(missing, again.execute(raise_on_error=False)):
            results[i] = reply
    if raise_on_error:
        for reply in results:
            if isinstance(reply, Exception):
                raise reply
    return results
