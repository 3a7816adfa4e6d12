"""The operator side of an App: inspect queues and jobs, pause, rate limit, purge,
cancel, and wait for results."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from redis import Redis

from fastq.admin.cancel import cancel_by_tag, cancel_ids
from fastq.admin.revive import revive
from fastq.admin.sharded import Sharded, valid_name
from fastq.job import JobDef
from fastq.protocol import control
from fastq.protocol.contracts import ReviveSection
from fastq.protocol.introspect import (
    Holder,
    JobInfo,
    TaggedJob,
    TagPage,
    broken_jobs,
    dead_jobs,
    get_job,
    holders,
    job_states,
    queue_stats,
    tagged_ids,
)
from fastq.protocol.keys import QueueKeys, logical_queue, validate_queue_name
from fastq.protocol.results import wait_for_result
from fastq.protocol.shards import sum_stats
from fastq.protocol.store import Store
from fastq.validate import RateLimit, check_job_id, check_rate_limit, check_tag


def _check_limit(limit: Optional[int], what: str) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{what}: limit must be an int >= 1 (or None: all), not {limit!r}")


class Admin:
    """The operator methods of an app (``fastq.App`` delegates to it): stats, flow
    control, purge, job lookup, cancel, tags and results; each takes a sharded
    queue's name and works on its shards (:class:`fastq.admin.sharded.Sharded`).

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
                f"unknown queue {queue!r}: no job was ever enqueued on it and no job of "
                f"this app is registered on it (known: {', '.join(known) or 'none'})"
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
        members = client.smembers(f"{self.store.namespace}:queues")
        seen = {q.decode() if isinstance(q, bytes) else str(q) for q in members}
        return sorted(seen | {j.queue for j in self.registry.values()})

    def get_job(self, job_id: str, queue: Optional[str] = None) -> Optional[JobInfo]:
        """What fastq knows of a job: state, attempts, last error, timestamps.

        Returns None for an unknown id, and for a job that completed (completed
        jobs are deleted). Without ``queue``, every known queue is searched.

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            candidates = [validate_queue_name(queue)] if queue else self.queues()
            for q in candidates:
                if not valid_name(q):
                    continue
                for keys in self.sharded.for_id(q, job_id):
                    info = get_job(self.store.redis, keys, job_id)
                    if info is not None:
                        return dataclasses.replace(info, queue=q)
        return None

    def holders(self, queue: Optional[str] = None) -> list[Holder]:
        """The workers holding jobs now (of ``queue``, or of every known queue), each
        with the jobs it holds: what ``rq info`` and ``celery inspect active`` show.
        An idle worker holds nothing and is not listed.

        Raises:
            TypeError, ValueError: an invalid or unknown queue.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            names = [queue] if queue is not None else self.queues()
            out: list[Holder] = []
            for q in names:
                if queue is not None or valid_name(q):
                    for keys in self.known_queue(q):
                        out += [
                            dataclasses.replace(h, queue=q) for h in holders(self.store.redis, keys)
                        ]
            return out

    # -- dead and broken jobs ---------------------------------------------------------

    def dead_jobs(self, queue: str, limit: int = 50) -> list[JobInfo]:
        """The ``limit`` oldest dead jobs of ``queue``: id, name, arguments, attempts,
        when it died (``failed_at``), its last error and traceback.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, a bad limit.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "dead_jobs")
        with self.store.producer_call():
            found = [
                dataclasses.replace(info, queue=queue)
                for keys in self.known_queue(queue)
                for info in dead_jobs(self.store.redis, keys, limit)
            ]
        found.sort(key=lambda info: info.failed_at or 0.0)  # the oldest of every shard
        return found[:limit]

    def broken_jobs(self, queue: str, limit: int = 50) -> list[JobInfo]:
        """Up to ``limit`` broken jobs of ``queue`` (payloads that could not be decoded,
        unknown job names), each with its ``broken_reason``.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, a bad limit.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "broken_jobs")
        with self.store.producer_call():
            found: list[JobInfo] = []
            for keys in self.known_queue(queue):
                found += [
                    dataclasses.replace(info, queue=queue)
                    for info in broken_jobs(self.store.redis, keys, limit - len(found))
                ]
                if len(found) >= limit:
                    break
            return found

    def retry_dead(self, queue: str, limit: Optional[int] = None) -> int:
        """Put dead jobs of ``queue`` back, oldest first, as new runs of the same ids:
        attempts, error and traceback reset, queued at the back (or by priority).
        Each id leaves the dead set and is queued in one script call, so a job is
        never both dead and queued, nor lost between. Tags and unique locks ended
        with the job and are not restored.

        Returns:
            How many jobs were put back (counted as ``revived`` in the stats).

        Raises:
            TypeError, ValueError: an invalid or unknown queue, a bad limit.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "retry_dead")
        with self.store.producer_call():
            return self._revive(queue, ReviveSection.DEAD, limit)[0]

    def retry_broken(self, queue: str, limit: Optional[int] = None) -> tuple[int, int]:
        """Put broken jobs of ``queue`` back (once the app knows their job, say), as
        :meth:`retry_dead` does. A payload that still cannot run is broken again by
        the worker that claims it.

        Returns:
            ``(revived, skipped)``: skipped are ids quarantined without a payload,
            which cannot run again (``purge(queue, broken=True)`` deletes them).

        Raises:
            TypeError, ValueError: an invalid or unknown queue, a bad limit.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "retry_broken")
        with self.store.producer_call():
            return self._revive(queue, ReviveSection.BROKEN, limit)

    def _revive(self, queue: str, section: ReviveSection, limit: Optional[int]) -> tuple[int, int]:
        """Revive up to ``limit`` jobs of ``section`` of each shard in turn (oldest
        first within a shard)."""
        revived = skipped = 0
        for keys in self.known_queue(queue):
            left = None if limit is None else limit - revived
            if left is not None and left <= 0:
                break
            done, passed = revive(self.store.redis, keys, section, left)
            revived, skipped = revived + done, skipped + passed
        return revived, skipped

    # -- cancel and tags ------------------------------------------------------------

    def cancel(self, job_id: str, queue: Optional[str] = None) -> bool:
        """Cancel a job: a ready or scheduled job never runs. A job a worker
        already holds (running, or claimed with its batch) still runs, but is not
        retried, recorded dead or handed back when its run ends; if it completes,
        it counts as processed and is no longer cancelled. ``get_job`` says
        ``cancelled``; the queue's stats count it as ``cancelled``.

        Without ``queue``, every known queue is searched. Re-enqueueing a
        cancelled id does nothing (while its marker lasts: the dead jobs' max age).

        Returns:
            True if it was cancelled; False for an unknown id, a job that
            completed, is dead or broken, or was cancelled before.

        Raises:
            TypeError, ValueError: an invalid job id or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_job_id(job_id)
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            for q in names:
                if not valid_name(q):
                    continue
                for keys in self.sharded.for_id(q, job_id):
                    if cancel_ids(self.store.redis, keys, [job_id]):
                        return True
        return False

    def cancel_by_tag(self, tag: str, queue: Optional[str] = None) -> int:
        """Cancel every live job tagged ``tag`` (in ``queue``, or in every known
        queue), as :meth:`cancel` does, in calls of at most 250 jobs so that
        cancelling a blast of any size never blocks Redis for long.

        Returns:
            How many jobs were cancelled.

        Raises:
            TypeError, ValueError: an invalid tag or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_tag(tag)
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            return sum(
                cancel_by_tag(self.store.redis, keys, tag)
                for q in names
                if valid_name(q)
                for keys in self.sharded.of(q)
            )

    def jobs_by_tag(
        self,
        tag: str,
        queue: Optional[str] = None,
        cursor: Optional[str] = None,
        count: int = 100,
    ) -> TagPage:
        """A page of the live jobs tagged ``tag``, each with its queue and state
        (``queued``, ``scheduled``, ``active``; ``gone`` if it ended meanwhile),
        in queue then id order. Jobs leave the tag when they end (done, dead,
        broken, cancelled, purged).

        Args:
            tag: the tag.
            queue: one queue; without it every known queue, one after the other.
            cursor: the ``cursor`` of the previous page (None: the first page).
            count: jobs per page, 1 to 1,000.

        Returns:
            A :class:`fastq.protocol.introspect.TagPage`: ``jobs`` and ``cursor`` (None on
            the last page).

        Raises:
            TypeError, ValueError: an invalid tag, queue name, cursor or count.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_tag(tag)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise ValueError(f"count must be an int within 1..1000, not {count!r}")
        after: Optional[str] = None
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            shards = [keys for q in names if valid_name(q) for keys in self.sharded.of(q)]
            physical = [keys.queue for keys in shards]  # a sharded queue's shards in turn
            if cursor is not None:
                # "<queue or shard>:<last id>": queue names hold no ':'
                if not isinstance(cursor, str) or ":" not in cursor:
                    raise ValueError(f"invalid cursor {cursor!r}: pass a page's cursor")
                at_queue, after = cursor.split(":", 1)
                if at_queue not in physical:
                    raise ValueError(f"invalid cursor {cursor!r}: unknown queue {at_queue!r}")
                shards = shards[physical.index(at_queue) :]
            jobs: list[TaggedJob] = []
            for keys in shards:
                ids = tagged_ids(self.store.redis, keys, tag, after, count - len(jobs) + 1)
                after = None
                more = len(ids) > count - len(jobs)
                ids = ids[: count - len(jobs)]
                states = job_states(self.store.redis, keys, ids)
                q = logical_queue(keys.queue)
                jobs += [TaggedJob(i, q, state) for i, state in zip(ids, states)]
                if more or (len(jobs) == count and keys.queue != physical[-1]):
                    return TagPage(jobs, f"{keys.queue}:{jobs[-1].id}")
        return TagPage(jobs, None)

    def result(self, job_id: str, timeout_s: float = 30.0, queue: Optional[str] = None) -> Any:
        """Wait for a job's return value and return it. The job must be registered
        with ``result_ttl_s``; the value is read as JSON (tuples come back as lists).

        It blocks on the job's result-ready list (``BLPOP``), looking at the job's
        state between blocks of at most a second, so it never polls in a tight loop.

        Args:
            job_id: the id ``enqueue`` returned.
            timeout_s: how long to wait, in seconds (0: look once).
            queue: the job's queue; without it every known queue is looked at.

        Returns:
            The job's return value.

        Raises:
            fastq.JobFailed: the job is dead or broken; it carries the job's last
                error (``error``) and ``traceback``.
            fastq.NoResult: the job is gone without a result: an unknown id, a job
                without ``result_ttl_s``, or a result that expired.
            fastq.ResultTimeout: (a ``TimeoutError``) it did not finish in time.
            ValueError, TypeError: ``timeout_s`` is not a finite number >= 0, or
                ``job_id`` or ``queue`` is not valid.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_job_id(job_id)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
            raise TypeError(f"timeout_s must be a number of seconds, not {timeout_s!r}")
        if not math.isfinite(timeout_s) or timeout_s < 0:
            raise ValueError(f"timeout_s must be a finite number >= 0, not {timeout_s!r}")
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.queues()
            candidates = [
                keys for q in names if valid_name(q) for keys in self.sharded.for_id(q, job_id)
            ]
            return wait_for_result(self.store.redis, candidates, job_id, float(timeout_s))
