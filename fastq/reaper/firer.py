"""Firing periodic jobs: the reaper's part that enqueues each slot's run.

Every reaper (one per pool, and any ``fastq reaper``) fires every schedule of its
app; the ``fire`` script's compare-and-set on the last slot fired makes each slot
fire once across all of them. A reaper keeps, per schedule, the next slot to try,
and sleeps until the earliest: it neither polls for nothing nor fires late.

Slots are instants on Redis' clock (:class:`fastq.connection.clock.RedisClock`):
a host whose clock is ahead, behind or stepped fires every slot once, on time.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Callable, Optional

import redis

from fastq.connection import cluster
from fastq.connection.clock import RedisClock
from fastq.connection.faults import REDIS_ERRORS, Outage, for_producer, unanswered
from fastq.periodic import PeriodicJob
from fastq.protocol import periodic
from fastq.protocol.contracts import FIRE, FireOutcome

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.firer")

# Woken by a monotonic timer, a reaper may find the wall clock a hair short of the
# slot: it sleeps this much past it.
_WAKE_MARGIN_S = 0.001
# While Redis' clock says a slot is still ahead (a master of a cluster whose clock
# differs from the one read), ask again when it should be due, but at least this often.
_NOT_DUE_RETRY_S = 1.0


class Firer:
    """Fires the periodic jobs of ``app`` (those on ``queues``, if given).

    Call :meth:`fire_due` whenever it asked to be called: it fires what is due and
    returns how long to sleep until the next slot.
    """

    def __init__(
        self,
        app: App,
        queues: Optional[list[str]] = None,
        *,
        who: str = "firer",
        logger: logging.Logger = log,
        silent: Optional[cluster.SilentNodes] = None,
        clock: Optional[RedisClock] = None,
        outage_of: Optional[Callable[[str], Outage]] = None,
    ) -> None:
        self.app = app
        self.jobs = [job for job in app.schedules.values() if queues is None or job.queue in queues]
        self._keys = {job.name: FIRE.keys_for(app.keys(job.queue)) for job in self.jobs}
        # the next slot to try, per job name; filled from Redis as each node first answers
        self._next_ms: dict[str, int] = {}
        self._retry_s = math.inf
        self._who = who
        self._logger = logger
        self._outages: dict[str, Outage] = {}  # by node name; "" on a single Redis
        # a reaper shares its outages (one log line per outage, not one per part)
        self._outage_of = outage_of
        self._silent = silent if silent is not None else cluster.SilentNodes(0.0)
        self.clock = clock if clock is not None else RedisClock(who, logger)

    def fire_due(self, client: redis.Redis) -> float:
        """Fire every schedule whose slot has come; returns the seconds until the
        next slot (``inf`` when there is no schedule), or until Redis is tried again.

        A fault of Redis is logged once per outage (as ``who``, on ``logger``) and
        tried again after a backoff; the slots not fired yet are fired then. Each
        master of a cluster on its own: one that fails costs the others nothing, and
        is tried again when its backoff is due, after the others (one that does not
        answer at all: not before ``silent`` says, shared with the reaper's sweep).

        Raises:
            redis.RedisError: what is no fault of Redis (a bug), as the client raised it.
        """
        if not self.jobs:
            return math.inf
        self._retry_s = math.inf
        waits: list[float] = []
        now = time.monotonic()
        failed = [name for name, outage in self._outages.items() if outage.ongoing]
        failed += [name for name in self._outages if name in self._silent]
        for name, jobs in cluster.by_node(client, self.jobs, self._periodic_key, failed):
            outage = self._outage(name)
            wait_s = max(outage.retry_at - now, self._silent.wait_s(name))
            if wait_s > 0:
                waits.append(wait_s)
                continue
            try:
                called = self._fire_due(client, jobs)
            except REDIS_ERRORS as exc:
                delay_s = outage.failed(exc)  # its slots not fired yet wait for it
                if name and unanswered(exc):
                    delay_s = self._silent.failed(name, delay_s)
                waits.append(delay_s)
                continue
            if called:  # Redis is back only once it answered
                outage.recovered()
                self._silent.answered(name)
            wait_ms = min(self._next_ms[job.name] for job in jobs) - self.clock.now_ms()
            waits.append(max(wait_ms / 1000, 0.0) + _WAKE_MARGIN_S)
        return min([*waits, self._retry_s])

    def _periodic_key(self, job: PeriodicJob) -> str:
        return self._keys[job.name][0]

    def _outage(self, name: str) -> Outage:
        if self._outage_of is not None:
            shared = self._outages[name] = self._outage_of(name)
            return shared
        outage = self._outages.get(name)
        if outage is None:
            who = self._who if name == "" else f"{self._who} (master {name})"
            outage = self._outages[name] = Outage(who, self._logger)
        return outage

    def _fire_due(self, client: redis.Redis, jobs: list[PeriodicJob]) -> bool:
        """Fire the due slots of ``jobs`` (one node's), by Redis' clock; returns
        whether Redis was called (and answered)."""
        readings = self.clock.readings
        # read afresh now and then (on a cluster, on the master of these jobs)
        now_ms = self.clock.now_ms(client, self._periodic_key(jobs[0]))
        called = self.clock.readings != readings
        unknown = [job for job in jobs if job.name not in self._next_ms]
        if unknown:
            self._load(client, unknown, now_ms)
            called = True
        for job in jobs:
            next_ms = self._next_ms[job.name]
            now_ms = self.clock.now_ms()
            if next_ms <= now_ms:
                slot_ms = job.schedule.latest_ms(next_ms, now_ms)
                self._next_ms[job.name] = self._fire(client, job, slot_ms)
                called = True
        return called

    def _load(self, client: redis.Redis, jobs: list[PeriodicJob], now_ms: int) -> None:
        """The next slot of each of ``jobs``: after the last fired (a missed one is
        due at once), or, for a schedule never fired, the next after ``now_ms``
        (Redis' clock)."""
        slots = periodic.load_slots(
            client, self.app.namespace, [(self.app.keys(job.queue), job.name) for job in jobs]
        )
        for job, last in zip(jobs, slots):
            after = last if last is not None else now_ms
            self._next_ms[job.name] = job.schedule.next_after_ms(after)
        log.info(
            "firer: %d periodic jobs: %s",
            len(jobs),
            ", ".join(f"{job.name} ({job.schedule.describe()})" for job in jobs),
        )

    def _fire(self, client: redis.Redis, job: PeriodicJob, slot_ms: int) -> int:
        """Fire one slot; returns the next slot to try."""
        job_id = job.run_id(slot_ms)
        envelopes = self.app.producer.envelopes
        tail = envelopes.tail(job.name, job.priority, now_ms=self.clock.now_ms())
        envelope = envelopes.encode(job.name, job.args, job.kwargs, tail)
        argv = FIRE.argv(job.name, slot_ms, job.overlap, job.priority, job_id, envelope)
        reply = FIRE.call(client, self._keys[job.name], argv)
        self.clock.observe(reply.now_ms)  # a reading for free (give or take the RTT)
        outcome = reply.outcome
        if outcome is FireOutcome.NOT_DUE:
            # this master's clock is behind the one read (a cluster's nodes differ)
            ahead_s = (slot_ms - reply.now_ms) / 1000
            log.debug("periodic job %s: slot %d due in %.3f s by Redis", job.name, slot_ms, ahead_s)
            self._retry_s = min(self._retry_s, ahead_s + _WAKE_MARGIN_S, _NOT_DUE_RETRY_S)
            return slot_ms
        if outcome is FireOutcome.FIRED:
            late_ms = reply.now_ms - slot_ms
            log.info("periodic job %s: fired %s (%d ms after its slot)", job.name, job_id, late_ms)
        elif outcome is FireOutcome.SKIPPED:
            log.info(
                "periodic job %s: slot %d skipped, its last run is still queued or running",
                job.name,
                slot_ms,
            )
        return job.schedule.next_after_ms(max(slot_ms, reply.last_slot_ms))


def last_fired(app: App) -> dict[str, tuple[Optional[int], Optional[str]]]:
    """Per periodic job of ``app``: the last slot fired (Unix ms) and the id of its
    last run, None when it never fired. One round trip.

    Raises:
        fastq.RedisUnavailable, fastq.RedisRefused: as producers raise them.
    """
    jobs = list(app.schedules.values())
    try:
        fired = periodic.last_fired(app.redis, [(app.keys(job.queue), job.name) for job in jobs])
    except REDIS_ERRORS as exc:
        raise for_producer(exc, app.redis_url) from exc
    return {job.name: slot_run for job, slot_run in zip(jobs, fired)}
