"""One worker round trip: acknowledge what ran, hand back what won't run, claim more.

Everything a worker says to Redis between two batches goes out as one pipeline
of raw EVALSHA calls, so a batch costs one round trip however it ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import redis

from fastq import scripts
from fastq.keys import QueueKeys


@dataclass
class Outcomes:
    """What became of the jobs of one queue since the last round trip."""

    done: list[bytes] = field(default_factory=list)
    retry: list[tuple[bytes, int, bytes]] = field(default_factory=list)  # id, delay_ms, envelope
    dead: list[tuple[bytes, bytes]] = field(default_factory=list)  # id, envelope with the error
    broken: list[tuple[bytes, str]] = field(default_factory=list)  # id, reason
    failed: int = 0
    unstarted: list[bytes] = field(default_factory=list)  # claimed, never run: hand back
    stalled: list[bytes] = field(default_factory=list)  # interrupted mid-run: hand back

    def __bool__(self) -> bool:
        return bool(
            self.done or self.retry or self.dead or self.broken or self.unstarted or self.stalled
        )

    def count(self) -> int:
        return len(self.done) + len(self.retry) + len(self.dead) + len(self.broken)

    def ack_argv(self, worker_id: str, dead_max_age_ms: int, dead_max_len: int) -> list[Any]:
        argv: list[Any] = [worker_id, dead_max_age_ms, dead_max_len, self.failed]
        argv.append(len(self.done))
        argv.extend(self.done)
        argv.append(len(self.retry))
        for job_id, delay_ms, env in self.retry:
            argv += (job_id, delay_ms, env)
        argv.append(len(self.dead))
        for job_id, env in self.dead:
            argv += (job_id, env)
        argv.append(len(self.broken))
        for job_id, reason in self.broken:
            argv += (job_id, reason)
        return argv


@dataclass
class Claim:
    """What a claim call returned: the reply holds ``id, envelope`` pairs from
    index 2 on."""

    queue: str
    reply: list[Any]

    @property
    def now_ms(self) -> int:
        return int(self.reply[0])

    @property
    def next_due_ms(self) -> int:
        """Earliest due time of a scheduled job, or -1 when none is scheduled."""
        return int(self.reply[1])

    def __len__(self) -> int:
        return (len(self.reply) - 2) // 2


class RoundTrip:
    """Builds and sends a worker's pipelined calls for its queues."""

    def __init__(
        self,
        client: redis.Redis,
        worker_id: str,
        queues: list[str],
        namespace: str,
        *,
        lease_ms: int,
        dead_max_age_ms: int,
        dead_max_len: int,
        max_stalls: int,
        promote_max: int = 1000,
    ) -> None:
        self.client = client
        self.worker_id = worker_id
        self.keys = {q: QueueKeys(namespace, q) for q in queues}
        self.lease_ms = lease_ms
        self.dead_max_age_ms = dead_max_age_ms
        self.dead_max_len = dead_max_len
        self.max_stalls = max_stalls
        self.promote_max = promote_max
        self._ack_keys = {q: k.ack_keys(worker_id) for q, k in self.keys.items()}
        self._claim_keys = {q: k.claim_keys(worker_id) for q, k in self.keys.items()}
        self._release_keys = {q: k.release_keys(worker_id) for q, k in self.keys.items()}

    def send(
        self,
        outcomes: dict[str, Outcomes],
        claim: Optional[tuple[str, int]] = None,
        *,
        release_all: bool = False,
    ) -> Optional[Claim]:
        """Acknowledge ``outcomes``, hand back their unstarted/stalled jobs, then
        claim up to ``n`` jobs of ``claim = (queue, n)``.

        ``release_all`` also hands back every lease this worker still holds after
        the acks: after a lost reply it may hold leases on jobs it never saw.
        Raises redis.ConnectionError/TimeoutError, after which nothing is known of
        what ran: the caller keeps ``outcomes`` and sends them again (acks are
        idempotent: a second ack of a job finds no lease and changes nothing).
        """
        wid = self.worker_id
        commands: list[scripts.Command] = []
        for queue, out in outcomes.items():
            if out.count() or out.failed:
                argv = out.ack_argv(wid, self.dead_max_age_ms, self.dead_max_len)
                commands.append((scripts.ACK, self._ack_keys[queue], argv))
            if out.unstarted:
                commands.append(
                    (
                        scripts.RELEASE,
                        self._release_keys[queue],
                        [wid, "unstarted", self.max_stalls, *out.unstarted],
                    )
                )
            if out.stalled:
                commands.append(
                    (
                        scripts.RELEASE,
                        self._release_keys[queue],
                        [wid, "stalled", self.max_stalls, *out.stalled],
                    )
                )
        if release_all:
            for queue in self.keys:
                argv = [wid, "unstarted", self.max_stalls]
                commands.append((scripts.RELEASE, self._release_keys[queue], argv))
        if claim is not None:
            queue, n = claim
            argv = [wid, n, self.lease_ms, self.promote_max]
            commands.append((scripts.CLAIM, self._claim_keys[queue], argv))
        if not commands:
            return None
        try:
            replies = scripts.call_many(self.client, commands)
        except BaseException:
            # interrupted mid-reply (a signal): the socket may still receive it
            self.client.connection_pool.disconnect()
            raise
        return Claim(claim[0], replies[-1]) if claim is not None else None

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until a job is enqueued on one of the queues or ``timeout_s`` passes."""
        wake_keys = [k.wake for k in self.keys.values()]
        return self.client.blpop(wake_keys, timeout=max(timeout_s, 0.001)) is not None
