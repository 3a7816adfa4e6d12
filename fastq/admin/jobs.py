"""The operator's methods on jobs: look one up, list the dead and the broken, put
them back, cancel by id or tag, find by tag, wait for a result."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from fastq.admin.operator import Admin
from fastq.admin.sharded import valid_name
from fastq.protocol import records
from fastq.protocol.cancel import Cancelled, cancel_by_tag, cancel_ids
from fastq.protocol.contracts import DELETE, ReviveSection
from fastq.protocol.introspect import (
    Holder,
    JobInfo,
    TaggedJob,
    TagPage,
    broken_jobs,
    dead_jobs,
    from_record,
    get_job,
    holders,
    job_states,
    tagged_ids,
)
from fastq.protocol.keys import QueueKeys, logical_queue, validate_queue_name
from fastq.protocol.listing import MAX_PAGE, WAITING, waiting_count, waiting_jobs
from fastq.protocol.results import wait_for_result
from fastq.protocol.revive import revive, revive_ids
from fastq.protocol.store import Store
from fastq.validate import check_job_id, check_tag, is_finite


def _check_limit(limit: Optional[int], what: str) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{what}: limit must be an int >= 1 (or None: all), not {limit!r}")


class JobAdmin:
    """The operator methods of an app on its jobs (``fastq.App`` delegates to it);
    each takes a sharded queue's name and looks in its shards.

    Args:
        store: the app's Redis and namespace.
        admin: the app's queue admin (which queues are known, and their shards).
    """

    def __init__(self, store: Store, admin: Admin) -> None:
        self.store = store
        self.admin = admin
        self.sharded = admin.sharded

    def get_job(self, job_id: str, queue: Optional[str] = None) -> Optional[JobInfo]:
        """What fastq knows of a job: state, attempts, last error, timestamps.

        A job that ended (done, dead, cancelled) is answered from its record while
        the queue keeps it (:meth:`fastq.App.keep_records`): ``state`` ``done``,
        ``dead`` or ``cancelled``, ``ended_at``, the ``worker`` that ran it, a
        dead job's ``attempts`` and ``last_error``. A kept return value
        (``result_ttl_s``) is ``result``, while it lasts (``has_result``). Returns
        None for an unknown id, and for a job whose record is gone. Without
        ``queue``, every known queue is searched. Read by the ``job_info`` script,
        as clients of other languages read a job (docs/protocol.md).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        with self.store.producer_call():
            candidates = [validate_queue_name(queue)] if queue else self.admin.queues()
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
            names = [queue] if queue is not None else self.admin.queues()
            out: list[Holder] = []
            for q in names:
                if queue is not None or valid_name(q):
                    for keys in self.admin.known_queue(q):
                        out += [
                            dataclasses.replace(h, queue=q) for h in holders(self.store.redis, keys)
                        ]
            return out

    def recent_jobs(
        self, queue: str, state: Optional[str] = None, limit: int = 50
    ) -> list[JobInfo]:
        """The jobs of ``queue`` that ended most recently, newest first, from their
        records: ``state`` ``done``, ``dead`` or ``cancelled`` (None: any). Each
        has its ``state``, ``ended_at``, ``worker``, and for a dead one its
        ``attempts`` and ``last_error``; no arguments (a dead job's are in
        :meth:`dead_jobs`). Looks through the newest 100,000 records of each shard.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, state or limit.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "recent_jobs")
        if state is not None and state not in records.OUTCOMES:
            raise ValueError(f"recent_jobs: state must be one of {records.OUTCOMES} or None")
        with self.store.producer_call():
            found = [
                from_record(job_id, queue, rec)
                for keys in self.admin.known_queue(queue)
                for job_id, rec in records.recent(self.store.redis, keys, state, limit)
            ]
        found.sort(key=lambda info: info.ended_at or 0.0, reverse=True)  # every shard's
        return found[:limit]

    def waiting_jobs(
        self, queue: str, state: str = "queued", offset: int = 0, limit: int = 50
    ) -> list[JobInfo]:
        """A page of the jobs of ``queue`` waiting to run: ``state`` ``queued`` (ready
        now, in the order workers claim them: priority ones first) or ``scheduled``
        (delayed, or a retry waiting out its backoff; soonest due first), from the
        ``offset``-th, each with its name, arguments, attempts and ``due_at``. A
        sharded queue's shards one after the other.

        Raises:
            TypeError, ValueError: an invalid or unknown queue, state, offset or limit
                (at most 500).
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        _check_limit(limit, "waiting_jobs")
        if limit > MAX_PAGE:
            raise ValueError(f"waiting_jobs: limit must be <= {MAX_PAGE}, not {limit}")
        if state not in WAITING:
            raise ValueError(f"waiting_jobs: state must be one of {WAITING}, not {state!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"waiting_jobs: offset must be an int >= 0, not {offset!r}")
        found: list[JobInfo] = []
        with self.store.producer_call():
            for keys in self.admin.known_queue(queue):
                page = waiting_jobs(self.store.redis, keys, state, offset, limit - len(found))
                found += [dataclasses.replace(info, queue=queue) for info in page]
                if len(found) >= limit:
                    break
                # the next shard's from its start, less what this shard had past offset
                offset = max(offset - waiting_count(self.store.redis, keys, state), 0)
        return found

    def retry_job(self, job_id: str, queue: Optional[str] = None) -> bool:
        """Put one dead or broken job back in its queue as a new run of the same id,
        its attempts reset (what ``fastq dead retry`` does to each). Returns False
        when no such job is dead or broken (it ran again, or is gone).

        Raises:
            TypeError, ValueError: an invalid id or queue.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        return self._on_its_queue(
            job_id,
            queue,
            lambda client, keys: any(
                revive_ids(client, keys, section, [job_id])
                for section in (ReviveSection.DEAD, ReviveSection.BROKEN)
            ),
        )

    def delete_job(self, job_id: str, queue: Optional[str] = None) -> bool:
        """Remove one dead or broken job for good (what ``fastq dead purge --id``
        does); its record stays. Returns False when no such job is dead or broken
        (it waits or runs: cancel it instead; or it is gone).

        Raises:
            TypeError, ValueError: an invalid id or queue.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        argv = DELETE.argv(job_id)
        return self._on_its_queue(
            job_id, queue, lambda client, keys: DELETE.call(client, DELETE.keys_for(keys), argv)
        )

    def _on_its_queue(
        self, job_id: str, queue: Optional[str], act: Callable[[Any, QueueKeys], bool]
    ) -> bool:
        """``act`` on the keys of ``job_id``'s shard of ``queue`` (or of each known
        queue in turn) until it says it acted; False if it never did."""
        check_job_id(job_id)
        with self.store.producer_call():
            client = self.store.redis
            names = [validate_queue_name(queue)] if queue else self.admin.queues()
            return any(
                act(client, keys)
                for q in names
                if valid_name(q)
                for keys in self.sharded.for_id(q, job_id)
            )

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
                for keys in self.admin.known_queue(queue)
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
            for keys in self.admin.known_queue(queue):
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
        for keys in self.admin.known_queue(queue):
            left = None if limit is None else limit - revived
            if left is not None and left <= 0:
                break
            done, passed = revive(self.store.redis, keys, section, left)
            revived, skipped = revived + done, skipped + passed
        return revived, skipped

    # -- cancel and tags ------------------------------------------------------------

    def cancel(self, job_id: str, queue: Optional[str] = None) -> Cancelled:
        """Cancel a job: a ready or scheduled job is stopped: it never runs, the
        queue's stats count it ``cancelled`` and ``get_job`` says ``cancelled``. A
        job a worker already holds (running, or claimed with its batch) may still
        run: it is not retried, recorded dead or handed back when its run ends
        (then it counts as cancelled); if it completes, it counts as processed.

        Without ``queue``, every known queue is searched. Re-enqueueing a
        cancelled id does nothing (while its marker or its record lasts).

        Returns:
            A :class:`fastq.protocol.cancel.Cancelled`: ``stopped`` 1 (it will not
            run) or ``held`` 1 (a worker held it: it may still run); false (both
            0) for an unknown id, a job that completed, is dead or broken, or was
            cancelled before.

        Raises:
            TypeError, ValueError: an invalid job id or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_job_id(job_id)
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.admin.queues()
            for q in names:
                if not valid_name(q):
                    continue
                for keys in self.sharded.for_id(q, job_id):
                    done = cancel_ids(self.store.redis, keys, [job_id])
                    if done:
                        return done
        return Cancelled()

    def cancel_by_tag(self, tag: str, queue: Optional[str] = None) -> Cancelled:
        """Cancel every live job tagged ``tag`` (in ``queue``, or in every known
        queue), as :meth:`cancel` does, in calls of at most 250 jobs so that
        cancelling a blast of any size never blocks Redis for long.

        Returns:
            A :class:`fastq.protocol.cancel.Cancelled`: ``stopped``, the jobs that
            will never run (what the queue's ``cancelled`` stat counts), and
            ``held``, those a worker already held, which may still run.

        Raises:
            TypeError, ValueError: an invalid tag or queue name.
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`enqueue`.
        """
        check_tag(tag)
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.admin.queues()
            total = Cancelled()
            for q in names:
                if valid_name(q):
                    for keys in self.sharded.of(q):
                        total += cancel_by_tag(self.store.redis, keys, tag)
            return total

    def jobs_by_tag(
        self,
        tag: str,
        queue: Optional[str] = None,
        cursor: Optional[str] = None,
        count: int = 100,
    ) -> TagPage:
        """A page of the live jobs tagged ``tag``, each with its queue and state
        (``queued``, ``scheduled``, ``active``; if it ended meanwhile, ``done``,
        ``dead`` or ``cancelled`` from its record, ``gone`` without one),
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
            names = [validate_queue_name(queue)] if queue else self.admin.queues()
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
        if not is_finite(timeout_s) or timeout_s < 0:
            raise ValueError(f"timeout_s must be a finite number >= 0, not {timeout_s!r}")
        with self.store.producer_call():
            names = [validate_queue_name(queue)] if queue else self.admin.queues()
            candidates = [
                keys for q in names if valid_name(q) for keys in self.sharded.for_id(q, job_id)
            ]
            return wait_for_result(self.store.redis, candidates, job_id, float(timeout_s))
