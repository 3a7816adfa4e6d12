"""One worker round trip: acknowledge what ran, hand back what won't run, claim more.

Everything a worker says to Redis between two batches goes out as one pipeline
of raw EVALSHA calls, so a batch costs one round trip however it ended. How it
goes out (one connection, or one per node of a Redis Cluster) is the wire's
business (:mod:`fastq.worker.wire`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

import redis

from fastq.protocol import scripts
from fastq.protocol.contracts import (
    ACK,
    ACK_TAKEN,
    CLAIM,
    RELEASE,
    TAKE,
    ClaimReply,
    ReleaseMode,
    is_stale,
    recorded_epoch,
)
from fastq.protocol.keys import QueueKeys, queue_of_key
from fastq.protocol.outcomes import Outcomes
from fastq.protocol.results import store_commands
from fastq.worker.wire import Wire, wire_for

log = logging.getLogger("fastq.worker")

# Due jobs one claim promotes at most. Measured on Redis 7.0 (loopback, this 2-core
# box): 1.3 us a job of priority 0, ~6 us a job with a priority or a retry (side-hash
# reads and deletes, a ZADD into prio); 250 keeps a claim well under 5 ms while a
# campaign of 30,000 jobs falls due at once.
PROMOTE_MAX = 250


@dataclass
class Claim:
    """What a claim call returned, for one queue."""

    queue: str
    reply: ClaimReply

    @property
    def now_ms(self) -> int:
        return self.reply.now_ms

    @property
    def now_exact_ms(self) -> float:
        """Redis' clock at the claim, to the microsecond (in ms)."""
        return self.reply.now_exact_ms

    @property
    def next_due_ms(self) -> int:
        """Earliest due time of a scheduled job, or -1 when none is scheduled."""
        return self.reply.next_due_ms

    def __len__(self) -> int:
        return len(self.reply)


# A peek at a queue: plain reads of what its claim would look at first (ready jobs,
# the earliest scheduled one, the paused flag), a few microseconds of Redis where an
# empty claim call costs several times that; after one TIME for every queue (one
# Redis), or one TIME each (a cluster: each queue's own node's clock).
PEEK_COMMANDS = 3


class StaleEpoch(redis.ConnectionError):
    """Redis refused a call of this worker as one of a request it had given up on:
    its epoch is older than the one Redis recorded for the worker's id (a process
    that had the same id before, whose last requests landed after it). Nothing was
    changed; the worker moves past ``recorded`` and sends again, as after a lost
    reply."""

    def __init__(self, message: str, recorded: int) -> None:
        super().__init__(message)
        self.recorded = recorded


class Request:
    """A round trip written to Redis whose replies are not read yet.

    It keeps the outcomes it carries: if the connection fails before the replies
    are read, the caller takes them back (``outcomes``) and sends them again.
    """

    def __init__(
        self,
        round_trip: RoundTrip,
        commands: list[scripts.Command],
        outcomes: dict[str, Outcomes],
        claim_queues: Sequence[str] = (),
        release_all: bool = False,
        peek_queues: Sequence[str] = (),
    ) -> None:
        self.round_trip = round_trip
        self.commands = commands
        self.outcomes = outcomes
        self.claim_queues = claim_queues
        self.release_all = release_all  # it hands back every lease the worker holds
        self.peek_queues = peek_queues
        # after result(): the first peeked queue found with work to claim, if any
        self.peeked: Optional[str] = None
        # after result(): the outcomes whose ack Redis refused, in part or whole (it
        # held those jobs no longer: a lease taken back, or Redis lost them)
        self.refused: list[tuple[str, Outcomes]] = []
        # after result(): (queue, reply) of each ack that left something to do (a
        # batch's share ended, links of chains moved on): for App.after_ack
        self.follow_ups: list[tuple[str, Any]] = []
        self.written_at = time.monotonic()  # built once written: the round trip's start
        # the jobs its worker had noted finished (its heartbeat slot's ring) when it
        # was written: answered, their acks are in
        self.finished = 0

    def replied(self) -> bool:
        """Has (part of) the reply already arrived? Never blocks, never reads."""
        return self.round_trip.replied()

    def wait_replied(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the reply to begin to arrive: False if it
        did not (the read that follows still waits, to the socket's timeout)."""
        return self.round_trip.wire.wait_replied(timeout_s)

    def result(self) -> list[Claim]:
        """Read the replies: the claims, in the order asked. Raises on a script
        error, and on a lost connection (redis.ConnectionError/TimeoutError), after
        which ``outcomes`` must be sent again and leases may be held that were
        never seen."""
        rt = self.round_trip
        # SCRIPT FLUSH or a restarted Redis: those answered NOSCRIPT did not run
        replies = scripts.resend_unloaded(
            self.commands, rt.read(len(self.commands)), rt.send, rt.load_scripts
        )
        for reply in replies:
            if isinstance(reply, Exception):
                if is_stale(reply):
                    raise StaleEpoch(
                        f"a call refused ({reply}): this worker id sent a newer epoch "
                        "before (another process of the same id?); moving past it",
                        recorded_epoch(reply),
                    ) from reply
                raise reply
        for (script, keys, _), reply in zip(self.commands, replies):
            if script is RELEASE.script and len(reply) > 1:  # a hand-back buried a job
                RELEASE.parse(reply).log_buried(log, queue_of_key(keys[0]))
            elif script is ACK.script:
                queue = queue_of_key(keys[0])
                if ACK.parse(reply) < self.outcomes[queue].count():
                    self.refused.append((queue, self.outcomes[queue]))
                if ACK.has_follow_ups(reply):
                    self.follow_ups.append((queue, reply))
        n_claims = len(self.claim_queues)
        if self.peek_queues:
            one_clock = self.round_trip.wire.one_clock
            step = PEEK_COMMANDS + (not one_clock)
            at = len(replies) - n_claims - one_clock - step * len(self.peek_queues)
            self.peeked = _first_with_work(
                self.peek_queues, replies[at : len(replies) - n_claims], one_clock
            )
        if not n_claims:
            return []
        return [
            Claim(queue, CLAIM.parse(reply))
            for queue, reply in zip(self.claim_queues, replies[-n_claims:])
        ]


def _ms(time_reply: Any) -> int:
    seconds, micros = time_reply
    return int(seconds) * 1000 + int(micros) // 1000


def _first_with_work(
    queues: Sequence[str], replies: list[Any], one_clock: bool = True
) -> Optional[str]:
    """The first of ``queues`` whose peek shows work a claim would take: ready or
    prioritised jobs, or a scheduled job already due (Redis' clock, from the TIME
    that starts the peek, or each queue's own), and not paused."""
    if one_clock:
        now_ms, at, step = _ms(replies[0]), 1, PEEK_COMMANDS
    else:
        now_ms, at, step = 0, 0, PEEK_COMMANDS + 1
    for i, queue in enumerate(queues):
        start = at + step * i
        if not one_clock:
            now_ms = _ms(replies[start])
            start += 1
        waiting, first_scheduled, paused = replies[start : start + PEEK_COMMANDS]
        due = False
        if first_scheduled:  # [[id, score]] (RESP3) or [id, score] (RESP2)
            first = first_scheduled[0]
            score = first[1] if isinstance(first, list) else first_scheduled[1]
            due = float(score) < now_ms + 1  # as the claim promotes: due in this ms or before
        if (waiting or due) and paused != b"1":
            return queue
    return None


class RoundTrip:
    """Builds a worker's pipelined script calls and sends them on its wire (one
    connection of the worker's own, or one per node of a cluster), so that a
    request can be written now and its replies read later.

    Its ``epoch`` goes out with every claim and ack (and the lease keeper's
    extensions): once it gives up on a request (``give_up``), the next carries a
    newer one, and Redis refuses the calls of the older request if they land after
    that (``lua/lib/epoch.lua``), so no claim leases jobs the worker never received.
    """

    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        worker_id: str,
        queues: list[str],
        namespace: str,
        *,
        cluster: bool = False,
        lease_ms: int,
        dead_max_age_ms: int,
        dead_max_len: int,
        max_stalls: int,
        promote_max: int = PROMOTE_MAX,
    ) -> None:
        self.worker_id = worker_id
        self.keys = {q: QueueKeys(namespace, q) for q in queues}
        self.lease_ms = lease_ms
        self.dead_max_age_ms = dead_max_age_ms
        self.dead_max_len = dead_max_len
        self.max_stalls = max_stalls
        self.promote_max = promote_max
        self.epoch = 0
        # the batch of each job claimed in one, by queue (its envelope's "b"), for
        # the ack to group its done jobs by: a cache, bounded, since a job missing
        # from it is looked up in Redis instead
        self.batch_of: dict[str, dict[bytes, str]] = {q: {} for q in queues}
        self._ack_keys = {q: ACK.keys_for(k, worker_id) for q, k in self.keys.items()}
        self._claim_keys = {q: CLAIM.keys_for(k, worker_id) for q, k in self.keys.items()}
        self._release_keys = {q: RELEASE.keys_for(k, worker_id) for q, k in self.keys.items()}
        self._ack_taken_keys = {q: ACK_TAKEN.keys_for(k, worker_id) for q, k in self.keys.items()}
        wake_keys = [k.wake for k in self.keys.values()]
        self.wire: Wire = wire_for(connect, wake_keys, cluster=cluster)

    @property
    def client(self) -> redis.Redis:
        """The worker's client, for calls outside its round trips (on a cluster
        made at first use: reading it may raise as a Redis call does)."""
        return self.wire.client

    @property
    def may_hold_leases(self) -> bool:
        """A claim went out (or may have): the worker may hold leases in Redis."""
        return self.wire.may_hold_leases

    def close(self) -> None:
        self.wire.close()

    def give_up(self, recorded: int = 0) -> None:
        """A request's reply is lost (or it was refused as stale, Redis having
        ``recorded`` a newer epoch): what follows carries a newer epoch, so whatever
        of that request Redis has not run yet it never will."""
        self.epoch = max(self.epoch, recorded) + 1

    # -- the wire ----------------------------------------------------------------------

    def write(self, commands: list[scripts.Command]) -> None:
        self.wire.write(commands)

    def read(self, n: int) -> list[Any]:
        """Read n replies; a script's error is returned in its place, not raised."""
        return self.wire.read(n)

    def replied(self) -> bool:
        """Are there reply bytes waiting to be read (a poll, no read)?"""
        return self.wire.replied()

    def send(self, commands: list[scripts.Command]) -> list[Any]:
        """Write ``commands`` and read their replies (a request written ahead is
        read before anything else is written, so these are the next replies)."""
        self.write(commands)
        return self.read(len(commands))

    def load_scripts(self, missing: Sequence[int] = ()) -> None:
        """Load the scripts where the requests go (all of them: ``missing``, the
        commands answered NOSCRIPT, are not looked at)."""
        self.wire.load_scripts()

    # -- requests ------------------------------------------------------------------------

    def request(
        self,
        outcomes: dict[str, Outcomes],
        claims: Sequence[str] = (),
        n: int = 0,
        *,
        release_all: bool = False,
        peek: Sequence[str] = (),
    ) -> Request:
        """Write (without waiting) the acks of ``outcomes``, the hand-back of their
        unstarted/stalled/interrupted jobs, the settling of taken at-most-once jobs, a
        peek at the queues ``peek`` (see ``Request.peeked``), then a claim of up to
        ``n`` jobs of each of ``claims``, in order.

        ``release_all`` also hands back every lease this worker still holds after
        the acks: after a lost reply it may hold leases on jobs it never saw.
        """
        wid = self.worker_id
        commands: list[scripts.Command] = []
        for queue, out in outcomes.items():
            # results before the ack that deletes their job: a waiter that finds the
            # job gone finds its result
            for job_id, encoded, ttl_ms in out.results:
                for cmd in store_commands(self.keys[queue], job_id, encoded, ttl_ms):
                    commands.append((scripts.PLAIN, (), cmd))
            if out.count() or out.failed:
                argv = out.ack_argv(
                    self.dead_max_age_ms, self.dead_max_len, wid, self.epoch, self.batch_of[queue]
                )
                commands.append(ACK.command(self._ack_keys[queue], argv))
            for mode, ids in out.releases():
                if ids:
                    cause = out.stalled_cause if mode is ReleaseMode.STALLED else ""
                    argv = RELEASE.argv(wid, mode, self.max_stalls, cause, self.epoch, ids)
                    commands.append(RELEASE.command(self._release_keys[queue], argv))
            if out.has_taken():  # after the releases: a job given back is the frontmost
                argv = out.ack_taken_argv(self.dead_max_age_ms, self.dead_max_len)
                commands.append(ACK_TAKEN.command(self._ack_taken_keys[queue], argv))
            if out.progress_ended:  # before the claim: a retry claimed again starts clean
                progress_key = self.keys[queue].progress
                commands.append((scripts.PLAIN, (), ("HDEL", progress_key, *out.progress_ended)))
        if release_all:
            for queue in self.keys:
                argv = RELEASE.argv(wid, ReleaseMode.UNSTARTED, self.max_stalls, epoch=self.epoch)
                commands.append(RELEASE.command(self._release_keys[queue], argv))
        if peek:
            one_clock = self.wire.one_clock
            if one_clock:
                commands.append((scripts.PLAIN, (), ("TIME",)))
            for queue in peek:
                k = self.keys[queue]
                if not one_clock:  # TIME on the queue's node
                    commands.append((scripts.ON_NODE_OF, (k.ready,), ("TIME",)))
                commands.append((scripts.PLAIN, (), ("EXISTS", k.ready, k.prio, k.group_ready)))
                commands.append((scripts.PLAIN, (), ("ZRANGE", k.scheduled, 0, 0, "WITHSCORES")))
                commands.append((scripts.PLAIN, (), ("HGET", k.settings, "paused")))
        if claims:
            argv = CLAIM.argv(wid, n, self.lease_ms, self.promote_max, self.epoch)
            for queue in claims:
                commands.append(CLAIM.command(self._claim_keys[queue], argv))
        if commands:
            self.write(commands)
        return Request(self, commands, outcomes, claims, release_all, peek)

    def take(self, queue: str, ids: list[bytes]) -> list[bytes]:
        """Take these at-most-once jobs out of ``queue`` (``take.lua``), waiting for
        the reply; returns the ids taken (those this worker still held). On the
        worker's other connection: a claim written ahead may be awaiting its reply
        on this one."""
        keys = TAKE.keys_for(self.keys[queue], self.worker_id)
        return TAKE.call(self.client, keys, TAKE.argv(ids))

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until a wake-up token comes (a job was enqueued or promoted on one
        of the queues) or ``timeout_s`` passes, to within a millisecond: a worker
        sleeping until a due job starts it on time. A wait cut short by a signal
        leaves no blocked command behind.

        Returns:
            Whether a token came.
        """
        return self.wire.wait_for_work(timeout_s)
