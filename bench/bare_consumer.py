"""The bare baseline: the least a leasing queue can do, as a consumer script.

It imports only redis-py and orjson, so that launched on its own
(``python -m bench.bare_consumer URL NAMESPACE BATCH``) it pays the same
interpreter and redis-py start-up as any worker process and nothing more.
e2e_worker forks it warm; e2e_pool also launches it cold, as a user starts a pool.

Per batch, one pipelined round trip of two raw EVALSHAs: an ack of the previous
batch (``ZREM inflight`` + ``HDEL jobs``) and a claim (``RPOP ready n``, then
``HGET jobs id`` and ``ZADD inflight deadline id`` per id). Each payload is
decoded and a no-op called with its args: the minimum any worker does.
"""

from __future__ import annotations

import sys

import orjson
import redis

QUEUE = "bench"
LEASE_MS = 60_000

BARE_CLAIM_LUA = b"""
-- KEYS[1] ready  KEYS[2] jobs  KEYS[3] inflight ; ARGV[1] n  ARGV[2] lease_ms
local ids = redis.call('RPOP', KEYS[1], ARGV[1])
if not ids then
    return {}
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local out = {}
for i = 1, #ids do
    local id = ids[i]
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[2], id)
    redis.call('ZADD', KEYS[3], deadline, id)
end
return out
"""

BARE_ACK_LUA = b"""
-- KEYS[1] inflight  KEYS[2] jobs ; ARGV ids
redis.call('ZREM', KEYS[1], unpack(ARGV))
return redis.call('HDEL', KEYS[2], unpack(ARGV))
"""


class BareKeys:
    def __init__(self, namespace: str) -> None:
        self.ready = f"{namespace}:{{{QUEUE}}}:ready"
        self.jobs = f"{namespace}:{{{QUEUE}}}:jobs"
        self.inflight = f"{namespace}:{{{QUEUE}}}:inflight"


def bare_noop(i: int) -> None:
    """What the bare drain calls per job: the same no-op, without fastq around it."""


def load_scripts(client: redis.Redis) -> tuple[str, str]:
    """(claim sha, ack sha); loading is idempotent."""
    return client.script_load(BARE_CLAIM_LUA), client.script_load(BARE_ACK_LUA)


def bare_consume(url: str, keys: BareKeys, batch: int, shas: tuple[str, str]) -> None:
    """Ack the previous batch and claim the next in one pipelined round trip of
    raw EVALSHAs, until a claim comes back empty. Several may run at once on the
    same keys (e2e_pool runs two)."""
    claim_sha, ack_sha = shas
    # a connection of its own: never a socket shared across fork
    client = redis.Redis.from_url(url)
    loads = orjson.loads
    fn = bare_noop
    pipe = client.pipeline(transaction=False)
    previous: list[bytes] = []
    while True:
        if previous:
            pipe.execute_command("EVALSHA", ack_sha, 2, keys.inflight, keys.jobs, *previous)
        pipe.execute_command(
            "EVALSHA", claim_sha, 3, keys.ready, keys.jobs, keys.inflight, batch, LEASE_MS
        )
        reply = pipe.execute()[-1]
        if not reply:
            break
        previous = reply[0::2]
        for payload in reply[1::2]:
            job = loads(payload)
            fn(*job["args"])
    client.close()


def main(argv: list[str]) -> int:
    url, namespace, batch = argv[0], argv[1], int(argv[2])
    client = redis.Redis.from_url(url)
    shas = load_scripts(client)
    client.close()
    bare_consume(url, BareKeys(namespace), batch, shas)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
