"""redis-py as the type checker sees it, the same under redis-py 7 and 8.

The two type the same calls differently: 7 types a command's reply ``Awaitable[T] | T``
(one command class serves the sync and the asyncio clients; 8 overloads by client),
types some values ``str`` where any encodable value goes, and leaves some functions
untyped that 8 types. A ``type: ignore`` that one needs, the other flags as unused;
these say what holds under both instead. Each returns what it is given: nothing
changes at run time.
"""

from __future__ import annotations

from typing import Any, Awaitable, TypeVar, Union, cast

import redis

T = TypeVar("T")


def sync_reply(reply: Union[Awaitable[T], T]) -> T:
    """``reply``, a sync client's: never the awaitable redis-py 7's types allow."""
    return cast(T, reply)


def unchecked(value: object) -> Any:
    """``value``, unchecked: to call a function of it that redis-py 7 leaves
    untyped (mypy --strict refuses the call), or to pass it where one version
    types the parameter narrower than what redis-py takes."""
    return value


def hash_page(
    client: redis.Redis, key: str, cursor: int, count: int
) -> tuple[int, dict[bytes, bytes]]:
    """One HSCAN of ``key`` from ``cursor``: the next cursor (0: done) and the fields
    and values found, bytes (fastq's clients do not decode; redis-py 8 types them
    ``bytes | str``, 7 the whole reply ``Awaitable | Any``)."""
    return cast("tuple[int, dict[bytes, bytes]]", client.hscan(key, cursor, count=count))
