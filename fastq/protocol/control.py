"""Flow control of one queue from the outside: pause, resume, rate limits, purge
(and the deletion of a whole namespace, the demo's).

A pause is a field of the queue's settings hash, read by ``claim.lua`` (one HGET
per claim, on a key that does not exist for a queue never paused): a paused
claim takes nothing and says so, and workers sleep until a wake-up. Resume
deletes the field and pushes the queue's wake-up token in one transaction, so
the idle workers claim again at once. Jobs held by workers are untouched by
both: they finish and are acknowledged as usual.

A rate limit is fields of the same hash, read by the same HMGET in the claim:
``rate``, ``rate_period_ms`` and ``rate_burst`` (written here), ``rate_shards`` (a
sharded queue's shard count: each shard's claim takes its share of the limit) and
``rate_tat_us`` (the GCRA state the claim keeps; see ``claim.lua``). Setting a limit starts it
afresh (a full burst) and wakes the idle workers, like a resume: a worker throttled
by the old limit may be asleep until a token far ahead.

A purge deletes waiting jobs in bounded calls of ``purge.lua`` (each at most
``batch`` ids), so that purging a queue of any size never blocks Redis for long.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import redis

from fastq.connection.cluster import is_cluster
from fastq.connection.typed import sync_reply
from fastq.protocol.contracts import GROUP_PAUSE, PURGE, PURGE_BATCH_MAX
from fastq.protocol.keys import NamespaceKeys, QueueKeys
from fastq.validate import RateLimit

PURGE_BATCH = 1000  # ids per purge call: about a millisecond of Redis time


def add_known_queues(client: redis.Redis, namespace: str, *queues: str) -> None:
    """Make ``queues`` known to the namespace (``NS:queues``): what ``fastq stats``,
    the dashboard and every producer's queue check read."""
    client.sadd(NamespaceKeys(namespace).queues, *queues)


def pause(client: redis.Redis, keys: QueueKeys) -> None:
    """Mark the queue paused: from the next claim on, workers take nothing from it."""
    client.hset(keys.settings, "paused", "1")


def resume(client: redis.Redis, keys: QueueKeys) -> None:
    """Lift a pause and wake the queue's idle workers (a no-op pause lifted is
    harmless: the token only makes one idle worker claim once)."""
    pipe = client.pipeline(transaction=True)
    pipe.hdel(keys.settings, "paused")
    pipe.rpush(keys.wake, 1)
    # one token is enough: a claim that leaves work behind pushes the next one
    pipe.ltrim(keys.wake, 0, 0)
    pipe.execute()


def wait_for_wake(client: redis.Redis, queues: Sequence[QueueKeys], timeout_s: float) -> bool:
    """Block until a wake-up token comes on one of ``queues`` (a job enqueued or
    promoted, a pause lifted) or ``timeout_s`` passes (to Redis' tick: up to 0.1 s
    more), as an idle worker waits. The token is taken: the claim that follows
    leaves one for the next waiter while work is left (``claim.lua``). On a cluster,
    one BLPOP takes keys of one slot: the first queue's only.

    Returns:
        Whether a token came.
    """
    wake = [k.wake for k in queues[: 1 if is_cluster(client) else None]]
    return sync_reply(client.blpop(wake, timeout=timeout_s)) is not None


_RATE_FIELDS = ("rate", "rate_period_ms", "rate_burst")
_RATE_SHARDS = "rate_shards"
_RATE_STATE = "rate_tat_us"


def set_rate_limit(
    client: redis.Redis, keys: QueueKeys, limit: Optional[RateLimit], shards: int = 1
) -> None:
    """Set the queue's rate limit (None: lift it), and wake its idle workers.

    ``shards``: the queue is one of a sharded queue's ``shards`` shards, and
    ``limit`` the whole queue's: this shard's claims take a ``1/shards`` share
    (one token every ``shards`` intervals, ``ceil(burst / shards)`` at once).
    """
    pipe = client.pipeline(transaction=True)
    pipe.hdel(keys.settings, *_RATE_FIELDS, _RATE_SHARDS, _RATE_STATE)
    if limit is not None:
        fields: dict[Any, Any] = {
            "rate": limit.rate,
            "rate_period_ms": limit.period_ms,
            "rate_burst": limit.burst,
        }
        if shards > 1:
            fields[_RATE_SHARDS] = shards
        pipe.hset(keys.settings, mapping=fields)
    pipe.rpush(keys.wake, 1)
    pipe.ltrim(keys.wake, 0, 0)
    pipe.execute()


def rate_limit(client: redis.Redis, keys: QueueKeys) -> Optional[RateLimit]:
    """The queue's rate limit, None when it has none."""
    # a list: redis-py 7 types hmget's fields as one
    fields: list[Optional[bytes]] = client.hmget(keys.settings, list(_RATE_FIELDS))  # type: ignore[assignment]
    rate, period_ms, burst = fields
    if rate is None or period_ms is None or burst is None:
        return None
    return RateLimit(int(rate), int(period_ms), int(burst))


def set_group_paused(client: redis.Redis, keys: QueueKeys, group: str, paused: bool) -> bool:
    """Pause one group of the queue (its jobs stay, the claim passes over them), or
    resume it and wake the queue's idle workers; False: it was so already."""
    return GROUP_PAUSE.call(
        client, GROUP_PAUSE.keys_for(keys), GROUP_PAUSE.argv("pause" if paused else "resume", group)
    )


def paused_groups(client: redis.Redis, keys: QueueKeys) -> list[str]:
    """The queue's paused groups, in the order they were paused."""
    field: Optional[bytes] = sync_reply(client.hget(keys.settings, "paused_groups"))  # type: ignore[assignment]
    return [name for name in (field or b"").decode("utf-8", "surrogateescape").split("\n") if name]


def set_key_rate_limit(
    client: redis.Redis, keys: NamespaceKeys, key: str, limit: Optional[RateLimit]
) -> None:
    """Override the limit of the jobs whose formatted ``rate_key`` is ``key`` (None:
    lift the override: their own applies again)."""
    if limit is None:
        client.hdel(keys.key_rates, key)
    else:
        client.hset(keys.key_rates, key, f"{limit.rate} {limit.period_ms} {limit.burst}")


def key_rate_limits(client: redis.Redis, keys: NamespaceKeys) -> dict[str, RateLimit]:
    """Every per-key override (key -> its limit); an entry that does not parse is
    skipped (none is written so)."""
    raw: dict[bytes, bytes] = client.hgetall(keys.key_rates)  # type: ignore[assignment]
    out: dict[str, RateLimit] = {}
    for key, value in raw.items():
        parts = value.split()
        if len(parts) == 3 and all(part.isdigit() for part in parts):
            rate, period_ms, burst = (int(part) for part in parts)
            out[key.decode("utf-8", "surrogateescape")] = RateLimit(rate, period_ms, burst)
    return out


def note_circuit(client: redis.Redis, keys: NamespaceKeys, key: str, opened: bool) -> None:
    """Note that the circuit of ``key`` opened (listed by :func:`circuit_states`) or
    closed (no longer listed)."""
    if opened:
        client.sadd(keys.circuits, key)
    else:
        client.srem(keys.circuits, key)


def circuit_states(client: redis.Redis, keys: NamespaceKeys) -> dict[str, dict[str, Any]]:
    """The circuit breakers open or half-open (those :func:`note_circuit` listed):
    key -> ``state`` (``open``, ``half-open``; ``closed`` for one whose close was not
    noted yet), ``failures`` in a row, ``open_s`` (the time left open), ``level``
    (opens in a row). One whose state is gone (expired) leaves the list."""
    members = sync_reply(client.smembers(keys.circuits))
    names = sorted(
        m.decode("utf-8", "surrogateescape") if isinstance(m, bytes) else str(m) for m in members
    )
    seconds, micros = sync_reply(client.time())
    now = int(seconds) * 1000 + int(micros) // 1000
    pipe = client.pipeline(transaction=False)
    for key in names:
        pipe.hmget(keys.circuit(key), ["f", "open", "level"])
    out: dict[str, dict[str, Any]] = {}
    gone = []
    for key, fields in zip(names, pipe.execute()):
        fails, open_until, level = (int(v) if v is not None else None for v in fields)
        if fails is None and open_until is None:
            gone.append(key)
            continue
        state = "closed" if open_until is None else "open" if now < open_until else "half-open"
        out[key] = {
            "state": state,
            "failures": fails or 0,
            "open_s": max(0, (open_until or now) - now) / 1000,
            "level": level or 0,
        }
    if gone:
        client.srem(keys.circuits, *gone)
    return out


def purge(
    client: redis.Redis,
    keys: QueueKeys,
    *,
    ready: bool,
    scheduled: bool,
    dead: bool,
    broken: bool,
    batch: int = PURGE_BATCH,
) -> int:
    """Delete the selected waiting jobs of a queue, ``batch`` at a time.

    Args:
        ready, scheduled, dead, broken: which jobs to delete; at least one.
        batch: ids deleted per script call (1 to ``PURGE_BATCH_MAX``).

    Returns:
        How many jobs were deleted.

    Raises:
        ValueError: nothing selected, or ``batch`` out of range.
    """
    if not (ready or scheduled or dead or broken):
        raise ValueError("purge: nothing selected (ready, scheduled, dead and broken are all off)")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= PURGE_BATCH_MAX:
        raise ValueError(f"purge: batch must be an int within 1..{PURGE_BATCH_MAX}, not {batch!r}")
    ks = PURGE.keys_for(keys)
    argv = PURGE.argv(batch, ready, scheduled, dead, broken)
    # jobs a busy producer adds meanwhile are not chased forever: at most as many
    # calls as the jobs there at the start need, plus one
    calls_left = _selected_count(client, keys, ready, scheduled, dead, broken) // batch + 1
    total = 0
    while calls_left > 0:
        taken, deleted = PURGE.call(client, ks, argv)
        total += deleted
        calls_left -= 1
        if taken < batch:  # the selected sections are empty
            break
    return total


def _selected_count(
    client: redis.Redis, keys: QueueKeys, ready: bool, scheduled: bool, dead: bool, broken: bool
) -> int:
    pipe = client.pipeline(transaction=False)
    if ready:
        pipe.llen(keys.ready)
        pipe.zcard(keys.prio)
        pipe.zcard(keys.group_ready)
    if scheduled:
        pipe.zcard(keys.scheduled)
    if dead:
        pipe.zcard(keys.dead)
    if broken:
        pipe.hlen(keys.broken)
    return sum(int(n) for n in pipe.execute())


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    """Delete every key of ``namespace`` (``SCAN``, then one ``DEL``): the demo's, once
    it ran; never a namespace in use."""
    keys = list(client.scan_iter(match=NamespaceKeys(namespace).every, count=1000))
    if keys:
        client.delete(*keys)
