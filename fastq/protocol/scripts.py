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
import logging
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, Union

import redis
from redis.exceptions import NoScriptError

from fastq.connection import cluster
from fastq.connection.faults import REDIS_ERRORS

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

Command = tuple[Union["Script", "Plain", "OnNodeOf"], Sequence[Any], Sequence[Any]]

log = logging.getLogger("fastq.redis")


@dataclass(frozen=True)
class Script:
    name: str
    source: bytes
    sha: str

    @classmethod
    def from_package(cls, name: str) -> Script:
        """``lua/<name>.lua`` of this package, its includes resolved (:func:`assemble`)."""
        source = assemble(name, resources.files("fastq.protocol").joinpath("lua"))
        return cls(name, source, hashlib.sha1(source).hexdigest())

    def args(self, keys: Sequence[Any], argv: Sequence[Any]) -> list[Any]:
        """The arguments of an EVALSHA of this script."""
        return ["EVALSHA", self.sha, len(keys), *keys, *argv]


INCLUDE = b"--! include "


def assemble(name: str, lua: Traversable) -> bytes:
    """The source of the script ``<lua>/<name>.lua`` as Redis gets it.

    Each leading ``--! include X`` line of the script pulls in ``<lua>/lib/X.lua``
    ahead of it (helpers shared by several verbs), and so does each leading include
    line of a lib: every lib comes once, after the libs it includes, in the order
    they are named (a Lua ``local function`` must be defined above its callers).
    An include cycle is refused. A first line ``#!lua flags=...`` (Redis 7 script
    flags) stays the first line.

    Raises:
        ValueError: the includes of ``name`` make a cycle.
    """
    body = lua.joinpath(f"{name}.lua").read_bytes()
    shebang: list[bytes] = []
    if body.startswith(b"#!"):
        first, _, body = body.partition(b"\n")
        shebang.append(first)
    parts: list[bytes] = []
    _include(lua.joinpath("lib"), _includes(body), parts, set(), [name])
    return b"\n".join([*shebang, *parts, body])


def _includes(text: bytes) -> list[str]:
    """The libs named by the leading ``--! include`` lines of ``text``."""
    names = []
    for line in text.splitlines():
        if not line.startswith(INCLUDE):
            break
        names.append(line[len(INCLUDE) :].strip().decode())
    return names


def _include(
    lib: Traversable, names: list[str], parts: list[bytes], done: set[str], path: list[str]
) -> None:
    """Append to ``parts`` each of ``names`` not ``done``, after what it includes
    (``path``: the script, then the libs being included, for a cycle's message)."""
    for name in names:
        if name in path[1:]:
            raise ValueError(f"a Lua include cycle: {' -> '.join([*path, name])}")
        if name in done:
            continue
        text = lib.joinpath(f"{name}.lua").read_bytes()
        _include(lib, _includes(text), parts, done, [*path, name])
        done.add(name)
        parts.append(text)


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

# The scripts loaded, by name: each contract loads its own as it is declared
# (fastq.protocol.contracts, which owns the list), and a Script is made only here,
# so these are every script this process may send.
BY_NAME: dict[str, Script] = {}


def load(name: str) -> Script:
    """The script ``lua/<name>.lua`` (its includes resolved), read once."""
    script = BY_NAME.get(name)
    if script is None:
        script = BY_NAME[name] = Script.from_package(name)
    return script


def loaded() -> tuple[Script, ...]:
    """Every script loaded (once ``fastq.protocol.contracts`` is imported, every
    contract's), for a ``SCRIPT LOAD`` of each."""
    return tuple(BY_NAME.values())


def load_all(client: redis.Redis) -> None:
    """Load every script loaded here into the server ``client`` talks to (every
    master of a cluster), in one round trip per server.

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
    for script in loaded():
        pipe.script_load(script.source)
    pipe.execute()


def preload(new_client: Callable[..., Any], timeout_s: float, who: str) -> None:
    """Load the scripts before a pool forks, so that N children do not each meet
    NOSCRIPT and load them at once. Best effort: a child reloads them if needed."""
    client = None
    try:
        # a cluster's client connects as it is made: inside the try
        client = new_client(retries=0, socket_timeout_s=timeout_s, connect_timeout_s=timeout_s)
        load_all(client)
    except REDIS_ERRORS as exc:
        log.warning("%s: Redis unavailable (%s); children will retry", who, exc)
    finally:
        if client is not None:  # no socket of the master's is inherited by its children
            client.close()


def _reload(client: redis.Redis, first_keys: Sequence[Any]) -> None:
    """Load the scripts again where a call was answered NOSCRIPT: on a cluster, the
    masters of those calls' keys, as the slot map has them now."""
    if cluster.is_cluster(client) and None not in first_keys:
        for node in cluster.masters_of(client, first_keys):
            load_all(node)
    else:
        load_all(client)  # a call without keys may have run on any node


def resend_unloaded(
    commands: Sequence[Command],
    replies: list[Any],
    send: Callable[[list[Command]], list[Any]],
    reload: Callable[[list[int]], None],
    *,
    not_run: tuple[type[Exception], ...] = (NoScriptError,),
    rounds: int = 1,
) -> list[Any]:
    """Send once more each of ``commands`` whose reply in ``replies`` is NOSCRIPT
    (it did not run: the server's scripts were flushed, or it restarted, or a replica
    was promoted), after ``reload`` (given their indices) loaded the scripts where
    they went; each new reply takes its command's place in ``replies`` (returned).

    The one way every caller resends (a script call, a pipeline of them, a
    worker's round trip, a durable enqueue). ``send`` writes the commands and
    returns their replies, errors in their places. A caller for whom more replies
    say "did not run" (``not_run``: a MOVED) resends those too, up to ``rounds``
    times (a resend may meet a MOVED, then a NOSCRIPT on the new master).
    """
    pending = [i for i, reply in enumerate(replies) if isinstance(reply, not_run)]
    while pending and rounds > 0:  # on a worker's every round trip: cheap when none
        rounds -= 1
        reload(pending)
        for i, reply in zip(pending, send([commands[i] for i in pending])):
            replies[i] = reply
        pending = [i for i in pending if isinstance(replies[i], not_run)]
    return replies


def _first_keys(commands: Sequence[Command], indices: Iterable[int]) -> list[Any]:
    """The first key of each of those commands (None: a command without keys)."""
    return [commands[i][1][0] if commands[i][1] else None for i in indices]


def _execute(client: redis.Redis, command: Command) -> Any:
    """One command's reply, an error reply returned in its place."""
    script, keys, argv = command
    try:
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
    except redis.ResponseError as exc:
        return exc


def call(client: redis.Redis, script: Script, keys: Sequence[Any], argv: Sequence[Any]) -> Any:
    """Run one script; on NOSCRIPT load the scripts and send it once more."""
    try:
        return client.execute_command(*script.args(keys, argv))  # type: ignore[no-untyped-call]
    except NoScriptError as exc:
        first: Any = exc
    commands: list[Command] = [(script, keys, argv)]
    reply = resend_unloaded(
        commands,
        [first],
        lambda again: [_execute(client, command) for command in again],
        lambda missing: _reload(client, _first_keys(commands, missing)),
    )[0]
    if isinstance(reply, Exception):
        raise reply
    return reply


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
    resend_unloaded(
        commands,
        results,
        lambda again: _pipeline(client, again).execute(raise_on_error=False),
        lambda missing: _reload(client, _first_keys(commands, missing)),
    )
    if raise_on_error:
        for reply in results:
            if isinstance(reply, Exception):
                raise reply
    return results


def call_then_wait(
    client: redis.Redis,
    commands: Sequence[Command],
    barrier_key: str,
    min_replicas: int,
    timeout_ms: int,
) -> list[Any]:
    """Send ``commands`` on one connection, then a barrier that writes nothing but is
    replicated (``HINCRBY <barrier_key> enqueued 0``: a queue's stats) and ``WAIT
    min_replicas timeout_ms``, in one round trip: the replies of the commands, the
    barrier's and the ``WAIT``'s (errors in their places, not raised). A durable
    enqueue's round trip (:mod:`fastq.producer.durable` says why the barrier)."""
    pipe: Any = client.pipeline(transaction=False)
    for script, keys, argv in commands:
        pipe.execute_command(*script.args(keys, argv))
    pipe.execute_command("HINCRBY", barrier_key, "enqueued", 0)
    pipe.execute_command("WAIT", min_replicas, timeout_ms)
    replies: list[Any] = pipe.execute(raise_on_error=False)
    return replies
