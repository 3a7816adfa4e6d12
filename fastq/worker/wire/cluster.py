"""A worker's wire on a Redis Cluster: each round trip a fan-out of per-node
sub-requests, and the idle wait a blocking connection per slot.

Every key of a queue carries the queue's hash tag, so each command of a round trip
goes to the master of its first key's slot (a plain command's first key follows its
name: ``("HDEL", key, ...)``). A request's commands are grouped per node, each group
packed and written on that node's connection (the worker's own, outside the
client's pools), and the replies read node by node, each on its own socket, and put
back in the order the commands were given.

A reply that says the slot map moved (``MOVED``, ``CLUSTERDOWN``, ``TRYAGAIN``,
``READONLY`` from a demoted master...) or a lost connection makes the wire refresh
its slot map before its next write; the round trip is then reported as failed
(the error raised) and the worker treats it as it treats any lost reply: its
outcomes are sent again and it hands back every lease it still holds.

While a slot migrates (resharding: ``MIGRATING`` on its master, ``IMPORTING`` on
the next one), a command whose keys have all left its master is answered ``ASK``:
the wire sends it once more, after ``ASKING``, to the node the ASK names (on a
connection of its own: the round trips' one may have later requests in flight),
puts that reply in its place, and keeps its slot map (the slot is still its
master's until the move is finalized). An ASK answered by another ASK, or a hop
that fails, fails the round trip as above. Redis serves a command of several keys
there only if every key it names exists: a script's keys include some that do not
(an empty dead set), so the scripts meet ``TRYAGAIN`` on both nodes and the
queue's round trips fail, backed off, until the slot is finalized; what an ASK
brings through are the single-key commands (a result kept, a peek's ZRANGE).

A BLPOP's keys must share one slot, not just one node, so the idle wait blocks on
one connection per slot of the worker's queues (one per queue, unless two queues'
tags share a slot), written all at once and watched with ``select()``. When one
answers, the BLPOPs still pending are cut (their connections closed), so that none
takes a later wake-up token unseen.
"""

from __future__ import annotations

import select
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable, cast

import redis
from hiredis import pack_command
from redis import exceptions as rex
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from fastq.connection.typed import unchecked
from fastq.protocol import scripts
from fastq.worker.wire.base import NO_REPLY_S, has_claim, no_reply, wait_until

# Error replies after which the slot map may have changed (a failover, a resharding).
_MOVES = (rex.AskError, rex.ClusterDownError, rex.TryAgainError, rex.ReadOnlyError)
_MOVE_CODES = ("UNBLOCKED", "MASTERDOWN", "LOADING")

# One node's share of a request: its connection and the indices of its commands.
_Part = tuple[Any, list[int]]
# A request written and not read: its commands (resent on an ASK) and its parts.
_Sent = tuple[list[scripts.Command], list[_Part]]


class SlotMoved(rex.ConnectionError):
    """A node answered ``MOVED`` (or ``ASK`` where it is not followed: an idle
    wait's BLPOP, an ASK's own reply): the command did not run there, the slot
    map changed (a failover, a resharding). Reported as a lost connection: the wire
    reads the slot map again, and the worker sends its round trip again. (On a
    client of one node, a MOVED means a misconfigured URL: not this.)"""


def _rerouted(exc: rex.ResponseError) -> rex.ResponseError | SlotMoved:
    if isinstance(exc, rex.AskError):  # MovedError too
        return SlotMoved(f"the slot map changed: {exc}")
    return exc


def _is_ask(reply: Any) -> bool:
    return isinstance(reply, rex.AskError) and not isinstance(reply, rex.MovedError)


def _moved(exc: BaseException) -> bool:
    """Does ``exc`` say the node may no longer serve the slot (or serve at all)?"""
    if isinstance(exc, (rex.ConnectionError, rex.TimeoutError, OSError, *_MOVES)):
        return True
    return isinstance(exc, rex.ResponseError) and str(exc).startswith(_MOVE_CODES)


class NodeWire:
    """Round trips and waits of one worker on a Redis Cluster (see the module)."""

    one_clock = False  # nodes' clocks differ: each queue's peek reads its own node's TIME

    def __init__(self, connect: Callable[[], redis.Redis], wake_keys: Sequence[str]) -> None:
        self._connect = connect
        self._client: redis.Redis | None = None
        self._making = threading.Lock()
        self.may_hold_leases = False
        self._conns: dict[str, Any] = {}  # node name -> the round trips' connection
        self._ask_conns: dict[str, Any] = {}  # node name -> the ASK hops' connection
        self._sent: deque[_Sent] = deque()  # written, not read yet (oldest first)
        self._stale = False  # the slot map must be read again before the next write
        self._wake_by_slot: dict[int, list[str]] = {}
        for key in wake_keys:
            self._wake_by_slot.setdefault(key_slot(key.encode()), []).append(key)
        self._wait_conns: dict[int, tuple[str, Any]] = {}  # slot -> node name, connection

    @property
    def client(self) -> redis.Redis:
        """The cluster's client (typed as a Redis: the same commands), made
        (connected, the slot map read) at first use.

        Raises:
            a Redis error: the cluster cannot be reached now.
        """
        if self._client is None:
            with self._making:  # a thread runner's rate-key gate may ask at once
                if self._client is None:
                    self._client = self._connect()
        return self._client

    @property
    def _cluster(self) -> RedisCluster:
        return cast(RedisCluster, self.client)

    def close(self) -> None:
        self._reset()
        for _, conn in self._wait_conns.values():
            conn.disconnect()
        self._wait_conns = {}
        if self._client is not None:
            self._client.close()

    # -- the slot map --------------------------------------------------------------

    def _refresh(self) -> None:
        """Read the slot map again (raises while the cluster cannot say), and drop
        the connections to nodes that no longer serve as masters."""
        unchecked(self._cluster.nodes_manager).initialize()  # untyped in redis-py 7.0
        self._stale = False
        masters = {node.name for node in self._cluster.get_primaries()}  # type: ignore[no-untyped-call]
        for conns in (self._conns, self._ask_conns):
            for name in [n for n in conns if n not in masters]:
                conns.pop(name).disconnect()

    def _node_conn(self, node: ClusterNode, conns: dict[str, Any] | None = None) -> Any:
        conns = self._conns if conns is None else conns
        conn = conns.get(node.name)
        if conn is None:
            pool = self._cluster.get_redis_connection(node).connection_pool
            conn = conns[node.name] = pool.make_connection()
        return conn

    def _failed(self, exc: BaseException) -> None:
        if _moved(exc):
            self._stale = True

    def _reset(self) -> None:
        """Every reply in flight is lost: the connections closed, nothing left to read."""
        for conn in [*self._conns.values(), *self._ask_conns.values()]:
            conn.disconnect()
        self._sent.clear()

    # -- round trips ---------------------------------------------------------------

    def write(self, commands: list[scripts.Command]) -> None:
        try:
            if self._stale:
                self._refresh()
            node_of = self._cluster.get_node_from_key
            parts: dict[str, _Part] = {}
            for i, (_, keys, argv) in enumerate(commands):
                node = node_of(keys[0] if keys else argv[1])  # type: ignore[no-untyped-call]
                part = parts.get(node.name)
                if part is None:
                    part = parts[node.name] = (self._node_conn(node), [])
                part[1].append(i)
            sent = list(parts.values())
            for conn, _ in sent:
                conn.connect()  # a refused connection: nothing sent anywhere yet
            if not self.may_hold_leases:
                self.may_hold_leases = has_claim(commands)
            for conn, indices in sent:
                packed = [
                    pack_command(tuple(commands[i][0].args(commands[i][1], commands[i][2])))
                    for i in indices
                ]
                conn.send_packed_command([b"".join(packed)])
        except BaseException as exc:
            self._failed(exc)
            self._reset()  # what went out to some nodes is never read
            raise
        self._sent.append((commands, sent))

    def read(self, n: int) -> list[Any]:
        if not self._sent:  # a failure since it was written reset the connections
            raise redis.ConnectionError("the connection was lost before the reply came")
        commands, sent = self._sent.popleft()
        replies: list[Any] = [None] * n
        try:
            for conn, indices in sent:
                for i in indices:
                    try:
                        replies[i] = conn.read_response()
                    except redis.ResponseError as exc:
                        replies[i] = self._error_reply(exc, follow_ask=True)
            asked = [i for i, reply in enumerate(replies) if _is_ask(reply)]
            if asked:
                self._follow_asks(commands, asked, replies)
        except BaseException as exc:
            # a lost connection, or a signal mid-reply: the rest may still arrive
            self._failed(exc)
            self._reset()
            raise
        return replies

    def _error_reply(self, exc: rex.ResponseError, *, follow_ask: bool) -> Any:
        """What stands in a command's place for its error reply: an ASK to follow
        as it is, a MOVED (or an ASK not followed) as SlotMoved."""
        if follow_ask and _is_ask(exc):
            return exc  # the slot is still its master's: the slot map stands
        if _moved(exc):
            self._stale = True
        return _rerouted(exc)

    def _follow_asks(
        self, commands: list[scripts.Command], asked: list[int], replies: list[Any]
    ) -> None:
        """Send each asked command once to the node its ASK names, after ASKING (as
        the read phase does: grouped per node, written to all, then read node by
        node), and put its reply in its place. Raises as a lost connection does."""
        hops: dict[str, tuple[Any, list[int]]] = {}
        for i in asked:
            ask: rex.AskError = replies[i]
            node = self._cluster.get_node(host=ask.host, port=ask.port)  # type: ignore[no-untyped-call]
            if node is None:  # a node the slot map does not know (yet)
                raise SlotMoved(f"an ASK to an unknown node: {ask}")
            hop = hops.get(node.name)
            if hop is None:
                hop = hops[node.name] = (self._node_conn(node, self._ask_conns), [])
            hop[1].append(i)
        for conn, indices in hops.values():
            conn.connect()
            packed = []
            for i in indices:
                script, keys, argv = commands[i]
                packed += [pack_command(("ASKING",)), pack_command(tuple(script.args(keys, argv)))]
            conn.send_packed_command([b"".join(packed)])
        for conn, indices in hops.values():
            for i in indices:
                conn.read_response()  # ASKING's +OK; an error raises: the hop failed
                try:
                    replies[i] = conn.read_response()
                except redis.ResponseError as exc:
                    replies[i] = self._error_reply(exc, follow_ask=False)

    def replied(self) -> bool:
        """Has every node of the oldest request begun to answer?"""
        if not self._sent:
            return False
        try:
            return all(
                conn._sock is not None and conn._parser.can_read(0) for conn, _ in self._sent[0][1]
            )
        except (OSError, redis.RedisError):
            return False

    def wait_replied(self, timeout_s: float) -> bool:
        """Wait for every node of the oldest request to begin to answer."""
        if not self._sent:
            return True  # the read raises
        deadline = time.monotonic() + timeout_s
        try:
            for conn, _ in self._sent[0][1]:
                if conn._sock is None:
                    return True
                if not conn._parser.can_read(max(deadline - time.monotonic(), 0)):
                    return False
        except (OSError, redis.RedisError):
            return True  # the read raises
        return True

    def load_scripts(self) -> None:
        """Load the scripts on every master this wire talks to, ASKs' targets too
        (after a NOSCRIPT: a promoted replica, a flushed node)."""
        conns = [*self._conns.values(), *self._ask_conns.values()]
        every = scripts.loaded()
        try:
            for conn in conns:
                conn.connect()
                for script in every:
                    conn.send_command("SCRIPT", "LOAD", script.source)
            for conn in conns:
                for _ in every:
                    conn.read_response()
        except BaseException as exc:
            self._failed(exc)
            self._reset()
            raise

    # -- the idle wait -------------------------------------------------------------

    def _wait_conn(self, slot: int) -> Any:
        """The blocking connection to the master of ``slot``, as the slot map has it."""
        node = self._cluster.nodes_manager.get_node_from_slot(slot)
        name, conn = self._wait_conns.get(slot, (None, None))
        if name != node.name:
            if conn is not None:
                conn.disconnect()
            pool = self._cluster.get_redis_connection(node).connection_pool
            conn = pool.make_connection()
            self._wait_conns[slot] = (node.name, conn)
        return conn

    def wait_for_work(self, timeout_s: float) -> bool:
        """A BLPOP per slot, then LMPOPs to the deadline (see BLPOP_OVERSHOOT_S)."""
        deadline = time.monotonic() + timeout_s
        waits: list[tuple[Any, list[str]]] = []
        try:
            if self._stale:
                self._refresh()
            waits = [(self._wait_conn(slot), keys) for slot, keys in self._wake_by_slot.items()]
            return wait_until(
                deadline,
                lambda blocking_s: self._block(waits, blocking_s, deadline),
                lambda: self._poll(waits),
            )
        except BaseException as exc:
            # a stop signal or a fault mid-wait: a BLPOP may still be pending
            self._failed(exc)
            for conn, _ in waits:
                conn.disconnect()
            if isinstance(exc, rex.AskError):
                raise _rerouted(exc) from exc
            raise

    @staticmethod
    def _block(waits: list[tuple[Any, list[str]]], blocking_s: float, deadline: float) -> bool:
        """BLPOP on every slot's connection at once; True once one brings a token."""
        timeout = f"{max(blocking_s, 0.001):.3f}"  # "0" would block forever
        for conn, _ in waits:
            conn.connect()
        pending = {}
        for conn, keys in waits:
            blpop: list[Any] = ["BLPOP", *keys, timeout]
            conn.send_packed_command([pack_command(tuple(blpop))])
            pending[conn._sock] = conn
        woke = False
        try:
            while pending and not woke:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    break
                readable, _, _ = select.select(list(pending), [], [], left_s)
                for sock in readable:
                    if pending.pop(sock).read_response() is not None:
                        woke = True
        finally:
            # a BLPOP still pending would take the next token and no one would see it
            for conn in pending.values():
                conn.disconnect()
        return woke

    @staticmethod
    def _poll(waits: list[tuple[Any, list[str]]]) -> bool:
        """One LMPOP per slot, written to all before any reply is read."""
        for conn, keys in waits:
            conn.connect()
            lmpop: list[Any] = ["LMPOP", len(keys), *keys, "LEFT"]
            conn.send_packed_command([pack_command(tuple(lmpop))])
        got = False
        for conn, _ in waits:
            if not conn.can_read(NO_REPLY_S):
                raise no_reply(NO_REPLY_S)  # the wait's caller disconnects them
            if conn.read_response():
                got = True
        return got
