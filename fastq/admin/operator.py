"""The operator's methods on queues: stats, pause, resume, rate limits, purge, the
queues known and their shards (the methods on jobs: :mod:`fastq.admin.jobs`)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from redis import Redis

from fastq.admin.sharded import Sharded
from fastq.job import JobDef
from fastq.protocol import control, introspect, records
from fastq.protocol.history import check_window_s, merge, read_history
from fastq.protocol.introspect import known_queues, queue_stats
from fastq.protocol.keys import QueueKeys, validate_queue_name
from fastq.protocol.shards import sum_stats
from fastq.protocol.store import Store
from fastq.protocol.workers import live_entries
from fastq.ratelimit import check_rate_key
from fastq.validate import RateLimit, check_group, check_rate_limit


class Admin:
    """The operator methods of an app on its queues (``fastq.App`` delegates to it):
    stats, flow control, purge, the queues known; each takes a sharded queue's name
    and works on its shards (:class:`fastq.admin.sharded.Sharded`).

    Args:
        store: the app's Redis and namespace.
        registry: the app's jobs by name (read as they are registered).
    """

    def __init__(self, store: Store, registry: Mapping[str, JobDef[Any]]) -> None:
        self.store = store
        self.registry = registry
        self.sharded = Sharded(store)

    def shards(self, queue: str) -> int:
        """How many shards ``queue`` has (1: not sharded), as Redis records it or
        this app declares it.

        Raises:
            TypeError, ValueError: an invalid queue name.
            fastq.ShardCountMismatch: this app declares another count.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        validate_queue_name(queue)
        with self.store.producer_call():
            return len(self.sharded.of(queue))

    def physical_queues(self, queues: Optional[list[str]] = None) -> list[str]:
        """The queues in Redis behind ``queues`` (default: :meth:`queues`): each
        queue's shards, for what sweeps every one (the reaper).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            return self.physical_queues_on(self.store.redis, queues)

    def physical_queues_on(self, client: Redis, queues: Optional[list[str]] = None) -> list[str]:
        """:meth:`physical_queues`, read with ``client`` (the reaper's own), raising
        what it raises."""
        return self.sharded.physical(client, self.queues_on(client) if queues is None else queues)

    # -- inspection ----------------------------------------------------------------

    def stats(self, queue: str) -> dict[str, int]:
        """Counts of one queue: ready, inflight, scheduled, dead, broken, and the
        counters enqueued, processed, failed, retried, stalled, stale_acks, purged,
        cancelled (``ready`` counts cancelled ids still in the list until popped);
        ``paused`` is 1 while the queue is paused, else 0; ``rate``,
        ``rate_period_ms`` and ``rate_burst`` its rate limit (all 0: none). A
        sharded queue's are the sums over its shards, with ``shards``: how many.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        validate_queue_name(queue)
        with self.store.producer_call():
            return self.stats_on(self.store.redis, queue)

    def stats_on(self, client: Redis, queue: str) -> dict[str, int]:
        """:meth:`stats`, read with ``client`` (a metrics scrape's own), raising what
        it raises."""
        return sum_stats([queue_stats(client, keys) for keys in self.sharded.of(queue, client)])

    def history(self, queue: str, window_s: float = 3600) -> list[tuple[int, int, int]]:
        """Jobs of ``queue`` done and failed per 10-second slot over the last
        ``window_s`` seconds (at most 7,200), oldest first, ending with the slot
        Redis' clock is in: ``(slot_ms, processed, failed)``, ``slot_ms`` the slot's
        start in Unix milliseconds; a slot without jobs counts 0. Kept in Redis by
        the pools (:mod:`fastq.protocol.history`); a sharded queue's are summed.

        Raises:
            TypeError, ValueError: an invalid queue name or window.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        validate_queue_name(queue)
        check_window_s(window_s)
        with self.store.producer_call():
            return merge(
                [read_history(self.store.redis, keys, window_s) for keys in self.sharded.of(queue)]
            )

    # -- flow control --------------------------------------------------------------

    def known_queue(self, queue: str) -> list[QueueKeys]:
        """The keys of each shard of ``queue``, a queue this namespace knows (see
        :meth:`queues`).

        Raises:
            TypeError, ValueError: an invalid name; ValueError: an unknown queue.
        """
        validate_queue_name(queue)
        known = self.queues()
        if queue not in known:
            raise ValueError(
                f"unknown queue {queue!r} on {self.store.where}: no job was ever enqueued "
                "on it and no job of this app is registered on it (known: "
                f"{', '.join(known) or 'none'})"
            )
        return self.sharded.of(queue)

    def pause(self, queue: str) -> None:
        """Stop workers claiming from ``queue`` (on every host) until :meth:`resume`.

        Jobs workers hold finish and are acknowledged; waiting jobs stay queued,
        enqueues still add to it, and nothing is lost or run twice. Idle workers
        sleep until the resume wakes them. The pause lives in Redis, in the
        queue's settings, so it survives restarts of workers and of the app.

        Raises:
            TypeError, ValueError: an invalid or unknown queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                control.pause(self.store.redis, keys)

    def resume(self, queue: str) -> None:
        """Lift a pause of ``queue`` and wake its idle workers at once; a no-op on a
        queue that is not paused.

        Raises:
            TypeError, ValueError: an invalid or unknown queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                control.resume(self.store.redis, keys)

    def set_rate_limit(
        self,
        queue: str,
        rate: Optional[int],
        *,
        per_s: float = 1.0,
        burst: Optional[int] = None,
    ) -> None:
        """Let at most ``rate`` jobs of ``queue`` start per ``per_s`` seconds, across
        every worker of every host; ``rate=None`` lifts the limit.

        The limit is checked inside the claim: a claim takes no more jobs than it
        allows, and a worker it stops sleeps until the next token is due. Starts
        are spaced evenly (one every ``per_s / rate``); after a quiet spell up to
        ``burst`` start at once, so any window of ``per_s`` sees at most
        ``rate + burst - 1`` starts. Retries count again (each attempt is a
        start); a pause stops claims whatever the limit. Setting a limit starts
        it afresh and wakes the queue's idle workers.

        Args:
            rate: jobs per period, an int within 1..1,000,000; None: no limit.
            per_s: the period in seconds, whole milliseconds within [0.001, 86400];
                at most 1,000,000 jobs a second.
            burst: an int within 1..1,000,000; default: the jobs of 50 ms at this
                rate, at least 1 (1 for 14/s, 5 for 100/s). 1: strictly evenly spaced.

        A sharded queue's limit is the whole queue's, split evenly: each of its K
        shards (on other Redis nodes, with no state in common) lets ``rate / K``
        start per period, ``ceil(burst / K)`` at once. The queue reaches
        the whole rate while every shard has work (producers spread a blast
        evenly); a shard that runs dry leaves its share unused. A limit
        exact whatever the spread is a per-key limit with a constant key
        (``@app.job(..., rate_key="mailer", rate=100)``: one state, one round trip
        more per batch).

        Raises:
            TypeError, ValueError: a bad rate, period or burst, an invalid or
                unknown queue; nothing is written then.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        limit = None if rate is None else check_rate_limit(rate, per_s, burst)
        with self.store.producer_call():
            shards = self.known_queue(queue)
            for keys in shards:
                control.set_rate_limit(self.store.redis, keys, limit, len(shards))

    def keep_records(
        self, queue: str, *, max_age_s: Optional[float] = None, max_len: Optional[int] = None
    ) -> None:
        """How long and how many of the records of ended jobs (done, dead, cancelled)
        ``queue`` keeps: what ``get_job``, ``fastq inspect`` and ``fastq jobs
        --state`` answer from, and what keeps an id idempotent after its job ended.
        None: the default (7 days, 100,000 per queue, or per shard); ``max_len=0``
        turns records off (those kept go as jobs end). Lives in the queue's settings.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, a limit below 0.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        age_ms = None if max_age_s is None else int(max_age_s * 1000)
        for what, value in (("max_age_s", age_ms), ("max_len", max_len)):
            if value is not None and (isinstance(value, bool) or value < 0):
                raise ValueError(f"keep_records: {what} must be >= 0 or None, not {value!r}")
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                records.configure(self.store.redis, keys, age_ms, max_len)

    def set_key_rate_limit(
        self,
        key: str,
        rate: Optional[int],
        *,
        per_s: float = 1.0,
        burst: Optional[int] = None,
    ) -> None:
        """Give one key of a per-key limit a rate of its own: the jobs whose
        ``rate_key`` formats to ``key`` (``"dom:slow.example"`` for
        ``rate_key="dom:{domain}"``) start at most ``rate`` per ``per_s`` seconds,
        every other key keeping its job's rate. ``rate=None`` lifts the override.
        Workers read the table at most a second late (``KEY_RATES_REFRESH_S``); the
        key's state carries on, so a rate lowered applies from its next token.

        Args:
            key: a formatted key, 1 to 200 printable characters.
            rate, per_s, burst: as :meth:`set_rate_limit`.

        Raises:
            TypeError, ValueError: a bad key or limit (nothing is written).
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_rate_key(key)
        limit = None if rate is None else check_rate_limit(rate, per_s, burst)
        with self.store.producer_call():
            control.set_key_rate_limit(self.store.redis, self.store.namespace_keys, key, limit)

    def key_rate_limits(self) -> dict[str, RateLimit]:
        """Every per-key override set by :meth:`set_key_rate_limit`: key -> limit.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            return control.key_rate_limits(self.store.redis, self.store.namespace_keys)

    def pause_group(self, queue: str, group: str) -> None:
        """Stop claims from taking the jobs of ``group`` of ``queue``: they wait, in
        their place, and the other groups are served; jobs of the group already
        running go on. A no-op on a group paused already.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, or an invalid group.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_group(group)
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                control.set_group_paused(self.store.redis, keys, group, True)

    def resume_group(self, queue: str, group: str) -> None:
        """Lift a pause of ``group`` of ``queue`` and wake its idle workers; a no-op
        on a group that is not paused.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, or an invalid group.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_group(group)
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                control.set_group_paused(self.store.redis, keys, group, False)

    def paused_groups(self, queue: str) -> list[str]:
        """The paused groups of ``queue`` (:meth:`pause_group`).

        Raises:
            TypeError, ValueError: an invalid or unknown queue.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            return control.paused_groups(self.store.redis, self.known_queue(queue)[0])

    def groups(self, queue: str) -> dict[str, int]:
        """The groups of ``queue`` that have ready jobs, in the order its claims serve
        them next, and how many each has ready (``""``: its jobs of no group, once
        the queue has had a grouped job). A group with none ready is not listed. Of
        a sharded queue, its shards' groups summed.

        Raises:
            TypeError, ValueError: an invalid or unknown queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        out: dict[str, int] = {}
        with self.store.producer_call():
            for keys in self.known_queue(queue):
                for group, n in introspect.group_depths(self.store.redis, keys).items():
                    out[group] = out.get(group, 0) + n
        return out

    def circuits(self) -> dict[str, dict[str, Any]]:
        """The circuit breakers (``@app.job(circuit_key=...)``) that are open or
        half-open: key -> ``state`` (``open``, ``half-open``), ``failures`` in a
        row, ``open_s`` (the time left open), ``level`` (opens in a row; each
        doubles the pause). Read from a list of them, never the keyspace.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            return control.circuit_states(self.store.redis, self.store.namespace_keys)

    def rate_limit(self, queue: str) -> Optional[RateLimit]:
        """The rate limit of ``queue`` (``str()`` of it reads ``14/s (burst 1)``),
        None when it has none (of a sharded queue: the whole queue's).

        Raises:
            TypeError, ValueError: an invalid queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        validate_queue_name(queue)
        with self.store.producer_call():
            return control.rate_limit(self.store.redis, self.sharded.of(queue)[0])

    def purge(
        self,
        queue: str,
        *,
        ready: bool = True,
        scheduled: bool = True,
        dead: bool = False,
        broken: bool = False,
    ) -> int:
        """Delete the waiting jobs of ``queue``: their envelopes and index entries.

        Jobs held by workers (in flight) are never touched. Deletes in calls of
        at most 1,000 jobs, so that a big queue never blocks Redis for long
        (other clients run between the calls).

        Args:
            ready: jobs ready to run (priority ones included).
            scheduled: delayed jobs and retries waiting out their backoff.
            dead: jobs that failed for good.
            broken: jobs that could not run (bad payload, unknown job).

        Returns:
            How many jobs were deleted (also added to the queue's ``purged`` count).

        Raises:
            TypeError, ValueError: an invalid or unknown queue name; ValueError:
                nothing selected.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        selected = {"ready": ready, "scheduled": scheduled, "dead": dead, "broken": broken}
        for name, value in selected.items():
            if not isinstance(value, bool):
                raise TypeError(f"purge: {name} must be True or False, not {value!r}")
        if not any(selected.values()):
            raise ValueError("purge: nothing selected (ready, scheduled, dead and broken are off)")
        with self.store.producer_call():
            return sum(
                control.purge(self.store.redis, keys, **selected)
                for keys in self.known_queue(queue)
            )

    def queues(self) -> list[str]:
        """Every queue this namespace has seen an enqueue for, or has registered (a
        sharded queue by its name: its shards are not listed).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            return self.queues_on(self.store.redis)

    def queues_on(self, client: Redis) -> list[str]:
        """:meth:`queues`, read with ``client``, raising what it raises."""
        seen = known_queues(client, self.store.namespace)
        return sorted(seen | {j.queue for j in self.registry.values()})

    def workers(self, queue: Optional[str] = None) -> list[dict[str, Any]]:
        """The live pools and lone workers (of ``queue``, or all), from the worker
        registry (:mod:`fastq.protocol.workers`): each a dict with ``kind``
        (``pool`` or ``worker``), ``id``, ``host``, ``pid``, ``started_at``,
        ``queues``, ``redis``, ``lapses_in_s`` and ``children``: per child its
        ``kind``, ``pid``, ``state`` (``busy``, ``idle``, ``waiting`` for work),
        ``job`` (``queue``, ``id``, ``since``) and ``in_flight`` when busy,
        ``rss`` and ``jobs_done``. Idle ones are listed; one that stopped is not,
        and one that died drops off within :data:`fastq.protocol.workers.TTL_S`.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            entries = live_entries(self.store.redis, self.store.namespace)
        return [e for e in entries if queue is None or queue in e.get("queues", ())]
