"""One Redis (or a Sentinel-managed master): a whole round trip is one write on one
connection of the worker's own, its replies read in order (the calls of
:class:`fastq.worker.wire.base.Wire`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command

from fastq.protocol import scripts
from fastq.worker.wire.base import NO_REPLY_S, has_claim, no_reply, wait_until


class OneWire:
    """One Redis: a request is one write on the worker's own connection, outside
    the client's pool, so that a request can be written now and its replies read
    later, in the order the requests went out."""

    one_clock = True

    def __init__(self, client: redis.Redis, wake_keys: Sequence[str]) -> None:
        self._client = client  # makes no connection until used
        self.wake_keys = list(wake_keys)
        # typed Any: redis-py's Connection methods carry no annotations
        self._conn: Any = client.connection_pool.make_connection()
        self.may_hold_leases = False

    @property
    def client(self) -> redis.Redis:
        return self._client

    def close(self) -> None:
        self._conn.disconnect()
        self._client.close()

    def write(self, commands: list[scripts.Command]) -> None:
        try:
            # hiredis packs a whole call in C; redis-py's wrapper around it
            # inspects every argument in Python first (a tenth of a worker's CPU)
            packed = b"".join(
                [pack_command(tuple(script.args(keys, argv))) for script, keys, argv in commands]
            )
            self._conn.connect()  # a refused connection sent nothing
            if not self.may_hold_leases:
                self.may_hold_leases = has_claim(commands)
            self._conn.send_packed_command([packed])
        except BaseException:
            self._conn.disconnect()
            raise

    def read(self, n: int) -> list[Any]:
        replies: list[Any] = []
        try:
            for _ in range(n):
                try:
                    replies.append(self._conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            # a lost connection, or a signal mid-reply: the rest may still arrive
            # later on this socket, so it is never used again
            self._conn.disconnect()
            raise
        return replies

    def replied(self) -> bool:
        """False on a closed or failed connection: the read that follows says
        what went wrong."""
        conn = self._conn
        if conn._sock is None:
            return False
        try:
            return bool(conn._parser.can_read(0))
        except (OSError, redis.RedisError):
            return False

    def wait_replied(self, timeout_s: float) -> bool:
        conn = self._conn
        if conn._sock is None:
            return True  # the read raises
        try:
            return bool(conn._parser.can_read(timeout_s))
        except (OSError, redis.RedisError):
            return True  # the read raises

    def load_scripts(self) -> None:
        every = scripts.loaded()
        for script in every:
            self._conn.send_command("SCRIPT", "LOAD", script.source)
        self.read(len(every))

    def wait_for_work(self, timeout_s: float) -> bool:
        """One BLPOP over every wake list, on the client's pool, then LMPOPs to the
        deadline (see BLPOP_OVERSHOOT_S); a reply NO_REPLY_S late raises."""
        deadline = time.monotonic() + timeout_s
        wake_keys = self.wake_keys
        try:
            return wait_until(
                deadline,
                lambda blocking_s: (
                    # "0" would block forever
                    self._wait_call(
                        ("BLPOP", *wake_keys, f"{max(blocking_s, 0.001):.3f}"), blocking_s
                    )
                    is not None
                ),
                lambda: bool(self._wait_call(("LMPOP", len(wake_keys), *wake_keys, "LEFT"))),
            )
        except BaseException:
            # a stop signal mid-BLPOP: its reply may still come, and would be read
            # as the next command's: no pooled connection is used again
            self._client.connection_pool.disconnect()
            raise

    def _wait_call(self, command: tuple[Any, ...], blocks_s: float = 0.0) -> Any:
        """``command`` on a pooled connection; its reply waited for ``blocks_s`` (a
        BLPOP's timeout) and NO_REPLY_S more at most."""
        pool = self._client.connection_pool
        conn: Any = pool.get_connection()  # typed Any: redis-py's methods carry no annotations
        try:
            conn.send_command(*command)
            if not conn.can_read(blocks_s + NO_REPLY_S):
                raise no_reply(blocks_s + NO_REPLY_S)
            return conn.read_response()
        finally:
            pool.release(conn)
