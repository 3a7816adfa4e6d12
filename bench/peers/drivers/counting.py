"""What every peer's job does: mark job ``i`` as run in Redis, so the harness can
count runs exactly (the counter) and distinct jobs (a bitmap), whatever the peer.

One pipelined round trip per job (SETBIT + INCR), the same cost for every peer.
The Redis URL comes from ``PEERBENCH_URL``; a client is made per process (after
any fork), never shared across one.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import redis

COUNT_KEY = "peerbench:count"  # one INCR per run of any job: duplicates show here
SEEN_KEY = "peerbench:seen"  # bit i set by job i: BITCOUNT is the distinct jobs run
# the memory workload's job, the same for every peer: send_email(*MAIL); its jobs
# carry no index, so they count runs only (INCR)
MAIL = ("user123@example.com", "Your weekly digest", 42)

_client: Optional[redis.Redis] = None
_async_client: Any = None
_pid = 0


def url() -> str:
    return os.environ["PEERBENCH_URL"]


def _sync_client() -> redis.Redis:
    global _client, _pid
    if _client is None or _pid != os.getpid():
        _client, _pid = redis.Redis.from_url(url()), os.getpid()
    return _client


def record(i: int) -> None:
    pipe = _sync_client().pipeline(transaction=False)
    pipe.setbit(SEEN_KEY, i, 1)
    pipe.incr(COUNT_KEY)
    pipe.execute()


def count() -> None:
    _sync_client().incr(COUNT_KEY)


def _aclient() -> Any:
    global _async_client
    if _async_client is None:
        import redis.asyncio

        _async_client = redis.asyncio.Redis.from_url(url())
    return _async_client


async def acount() -> None:
    await _aclient().incr(COUNT_KEY)


async def arecord(i: int) -> None:
    """``record`` for asyncio peers, on a redis.asyncio client of this process."""
    pipe = _aclient().pipeline(transaction=False)
    pipe.setbit(SEEN_KEY, i, 1)
    pipe.incr(COUNT_KEY)
    await pipe.execute()


def report(seconds: float, jobs: int) -> None:
    """A producer's result, the one line the harness reads from its stdout."""
    import json

    print(json.dumps({"seconds": seconds, "jobs": jobs}), flush=True)
