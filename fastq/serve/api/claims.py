"""Workers in any language, over HTTP: what their claim, heartbeat, done and fail
calls do in Redis (no HTTP here: :mod:`fastq.serve.api.workers` maps routes onto this).

Each claim over HTTP is a short-lived worker of its own: a worker id
``http:<name>:<digest>`` whose held set and lease deadline the scripts keep exactly
as they keep a Python worker's (``claim.lua``, ``extend.lua``, ``ack.lua``,
``release.lua``). So a lease nobody extends lapses and the reaper hands the jobs back
as it does a dead Python worker's, counting a stall; nothing here holds state, and any
number of ``fastq serve`` processes may share one Redis.

The claim's **token** names the claim: ``<queue>:<lease_ms>:<name>:<secret>``, the
secret 128 random bits that Redis never sees. The worker id ends with a digest of the
secret, so a token cannot be derived from anything Redis holds (a job's record names
its worker), and a client cannot act on another's claim by guessing. The jobs of one
claim share its token and its one lease: a heartbeat for any of them extends them all,
as a Python worker's lease covers its whole batch.

A lease whose deadline has passed is gone, whether or not a reaper took it back yet:
a heartbeat, ``done`` or ``fail`` that comes after it first hands the claim's jobs back
as the reaper would (``release`` in its ``expired`` mode, which checks the deadline in
Redis, atomically), and is then refused (:class:`LeaseGone`, HTTP 409). The ack of a
refused ``done`` or ``fail`` still goes to Redis, where ``ack.lua`` counts it in the
queue's ``stale_acks``, once per job and claim; it applies nothing.
"""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

import redis

from fastq import retry
from fastq._accel import codec
from fastq.policy import JobPolicy
from fastq.protocol import records, scripts
from fastq.protocol.contracts import ACK, CLAIM, EXTEND, RELEASE, ReleaseMode
from fastq.protocol.keys import QueueKeys, shard_names
from fastq.protocol.results import encode_result, send_progress, store_commands
from fastq.runners.settle import failure_fields
from fastq.serve.api.claim_token import (
    SECRET_BYTES,
    ClaimToken,
    LeaseGone,
    check_claim,
    check_failure,
    check_id,
    progress_report,
)
from fastq.validate import check_queue_name, check_result_ttl_s
from fastq.worker.leases import PROGRESS_TTL_LEASES
from fastq.worker.roundtrip import PROMOTE_MAX

if TYPE_CHECKING:
    from fastq.app import App

# The return value of a job done over HTTP is kept this long unless the call says.
DEFAULT_RESULT_TTL_S = 24 * 3600.0


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    token: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "kwargs": self.kwargs,
            "attempt": self.attempt,
            "token": self.token,
        }


class _AnyName(Mapping[str, str]):
    """A registry that knows every job name: an HTTP worker runs whatever its queue
    holds (``codec.decode_claim`` looks names up with ``.get``)."""

    def __getitem__(self, name: str) -> str:
        return name

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_ANY_NAME = _AnyName()


class Claims:
    """The Redis side of HTTP workers, for one app (its Redis, namespace, limits and
    registered jobs' policies). Every method is one or two round trips of blocking
    redis-py calls, safe from any thread."""

    def __init__(self, app: App) -> None:
        self.app = app

    @property
    def client(self) -> redis.Redis:
        return self.app.redis

    # -- claim -----------------------------------------------------------------------

    def claim(
        self, queue: str, max_jobs: object, lease_s: object, name: object
    ) -> list[ClaimedJob]:
        """Lease up to ``max_jobs`` ready jobs of ``queue`` (of each of its shards in
        turn, until enough) to a new claim of worker ``name``, for ``lease_s``.

        Raises:
            ValueError: a wrong queue name, ``max``, ``lease_s`` or ``worker``.
        """
        try:
            check_queue_name(queue)
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        n, lease_ms, name = check_claim(max_jobs, lease_s, name)
        app, client = self.app, self.client
        shards = shard_names(queue, app.shard_counts.count(client, app.namespace, queue))
        start = random.randrange(len(shards))  # shards in turn, each claim elsewhere first
        secret = secrets.token_hex(SECRET_BYTES)
        jobs: list[ClaimedJob] = []
        for physical in shards[start:] + shards[:start]:
            token = ClaimToken(physical, lease_ms, name, secret)
            jobs += self._claim_shard(app.keys(physical), token, n - len(jobs))
            if len(jobs) >= n:
                break
        return jobs

    def _claim_shard(self, keys: QueueKeys, token: ClaimToken, n: int) -> list[ClaimedJob]:
        wid = token.worker_id
        argv = CLAIM.argv(wid, n, token.lease_ms, PROMOTE_MAX)
        reply = CLAIM.call(self.client, CLAIM.keys_for(keys, wid), argv)
        if not len(reply):
            return []
        runnable, broken, _ = reply.decode(_ANY_NAME)
        if broken:
            # quarantined as a Python worker does: the scripts' broken set, with why
            commands = [self._ack(keys, token, broken=broken)]
            if not runnable:  # nothing left under this claim's lease: drop it
                commands.append(self._release_all(keys, wid))
            scripts.call_many(self.client, commands)
        shown = str(token)
        return [
            ClaimedJob(job_id.decode(), name, args, kwargs, attempt, shown)
            for job_id, name, args, kwargs, attempt, _ in runnable
        ]

    # -- heartbeat -------------------------------------------------------------------

    def heartbeat(self, job_id: str, token: object, progress: object = None) -> int:
        """Extend the lease of the claim holding ``job_id`` by its lease length (every
        job of the claim: they share it); with ``progress`` (a fraction in [0, 1], or
        ``{"fraction": f, "meta": m}``), keep it as a Python job's ``set_progress``
        does. Returns how many jobs the lease covers.

        Raises:
            ValueError: a malformed token or progress.
            LeaseGone: the claim holds the job no longer.
        """
        check_id(job_id)
        claim = ClaimToken.parse(token)
        report = None if progress is None else progress_report(progress)
        keys, wid = self.app.keys(claim.queue), claim.worker_id
        extend = EXTEND.argv(wid, claim.lease_ms)
        replies = scripts.call_many(
            self.client,
            [
                self._take_back_if_lapsed(keys, wid),
                EXTEND.command(EXTEND.keys_for(keys, wid), extend),
                (scripts.PLAIN, (), ("SISMEMBER", keys.held(wid), job_id)),
            ],
        )
        covered, held = int(replies[1]), int(replies[2])
        if not (covered and held):
            raise LeaseGone(_gone(job_id))
        if report is not None:
            # only while held: a job handed back must not show a lost run's progress
            ttl_ms = max(PROGRESS_TTL_LEASES * claim.lease_ms, 60_000)
            latest = {keys.queue: {job_id.encode(): report}}
            send_progress(self.client, [keys], latest, ttl_ms)
        return covered

    # -- done ------------------------------------------------------------------------

    def done(
        self,
        job_id: str,
        token: object,
        result: object = None,
        has_result: bool = False,
        result_ttl_s: object = None,
    ) -> None:
        """Acknowledge ``job_id`` as done; with ``has_result``, keep ``result`` (JSON)
        as a Python job's return value is kept, for ``result_ttl_s`` (default: a
        day). A ``done`` sent again after it went through (its reply lost) succeeds
        again and changes nothing.

        Raises:
            ValueError: a malformed token, or a result JSON cannot keep.
            LeaseGone: the claim holds the job no longer: nothing is applied, and the
                late ack is counted (``stale_acks``).
        """
        check_id(job_id)
        claim = ClaimToken.parse(token)
        keys, wid = self.app.keys(claim.queue), claim.worker_id
        commands: list[scripts.Command] = []
        if has_result:
            encoded, ttl_ms = self._result(result, result_ttl_s)
            # the result before the ack that deletes the job (a waiter that finds the
            # job gone finds its result): only once the job is known to be held, so a
            # refused done keeps nothing
            _, held = scripts.call_many(
                self.client,
                [
                    self._take_back_if_lapsed(keys, wid),
                    (scripts.PLAIN, (), ("SISMEMBER", keys.held(wid), job_id)),
                ],
            )
            if int(held):
                for cmd in store_commands(keys, job_id.encode(), encoded, ttl_ms):
                    commands.append((scripts.PLAIN, (), cmd))
        else:
            commands.append(self._take_back_if_lapsed(keys, wid))
        self._settle(keys, claim, job_id, commands, done=[job_id.encode()])

    def _result(self, result: object, result_ttl_s: object) -> tuple[bytes, int]:
        try:
            encoded = encode_result(result)
        except ValueError as exc:  # ResultNotSerializable
            raise ValueError(f"result: {exc}") from None
        if result_ttl_s is None:
            return encoded, int(DEFAULT_RESULT_TTL_S * 1000)
        try:
            return encoded, int(check_result_ttl_s(result_ttl_s) * 1000)
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None

    # -- fail ------------------------------------------------------------------------

    def fail(
        self,
        job_id: str,
        token: object,
        error: object,
        retry_it: object = True,
        traceback: object = None,
    ) -> str:
        """Settle ``job_id`` as failed with ``error``: retried after the backoff while
        its policy allows (the envelope's ``retries``, ``backoff`` and
        ``age_limit_ms``, else those of the app's registered job of that name, else
        fastq's defaults: 5 retries, exponential backoff), else, or with ``retry_it``
        false, dead with its error. Returns ``"retry"`` or ``"dead"``.

        Raises:
            ValueError: a malformed token, error, retry or traceback.
            LeaseGone: the claim holds the job no longer (counted as a stale ack).
        """
        check_id(job_id)
        claim = ClaimToken.parse(token)
        check_failure(error, retry_it, traceback)
        keys, wid = self.app.keys(claim.queue), claim.worker_id
        _, held, raw = scripts.call_many(
            self.client,
            [
                self._take_back_if_lapsed(keys, wid),
                (scripts.PLAIN, (), ("SISMEMBER", keys.held(wid), job_id)),
                (scripts.PLAIN, (), ("HGET", keys.jobs, job_id)),
            ],
        )
        bid = job_id.encode()
        if not int(held):  # refused, and counted as a stale ack (unless a repeat)
            self._settle(keys, claim, job_id, [], done=[bid], repeat_of="dead")
            return "dead"
        if raw is None:  # cancelled while held: the ack drops it and counts it cancelled
            self._settle(keys, claim, job_id, [], dead=[(bid, b"{}")], failed=1)
            return "dead"
        decoded, _, _ = codec.decode_claim([bid, raw], 0, _ANY_NAME)
        env: dict[str, Any] = decoded[0][5] if decoded else {}
        attempt = decoded[0][4] if decoded else 1
        assert isinstance(error, str) and isinstance(retry_it, bool)  # checked above
        tb = traceback if isinstance(traceback, str) else None
        outcome = self._failure(env, attempt, error, tb, retry_it)
        if outcome[0] == "retry":
            delay_ms, envelope = outcome[1], outcome[2]
            self._settle(keys, claim, job_id, [], retry=[(bid, delay_ms, envelope)], failed=1)
            return "retry"
        self._settle(keys, claim, job_id, [], dead=[(bid, outcome[2])], failed=1)
        return "dead"

    def _failure(
        self, env: dict[str, Any], attempt: int, error: str, tb: Optional[str], retry_it: bool
    ) -> tuple[str, int, bytes]:
        """``("retry", delay_ms, envelope)`` or ``("dead", 0, envelope)``."""
        target = self.app.registry.get(env.get("n", env.get("name")))  # type: ignore[arg-type]
        policy = target.policy if target is not None else JobPolicy()
        retries = env.get("retries", policy.retries)  # an envelope may override the policy
        if isinstance(retries, bool) or not isinstance(retries, int):
            retries = policy.retries
        if retry_it and attempt <= retries:
            backoff, limit_ms, _ = retry.resolve(env, policy.backoff, policy.age_limit_s)
            delay_ms = backoff.delay_ms(attempt, random.random())
            now_ms = int(time.time() * 1000)
            too_old = (
                None if limit_ms is None else retry.age_limit_error(env, limit_ms, now_ms, delay_ms)
            )
            if too_old is None:
                fields = failure_fields(attempt, error, tb)
                return "retry", delay_ms, codec.update_envelope(env, fields)
            error = f"{too_old}; last error: {error}"
        return "dead", 0, codec.update_envelope(env, failure_fields(attempt, error, tb))

    # -- settling --------------------------------------------------------------------

    def _settle(
        self,
        keys: QueueKeys,
        claim: ClaimToken,
        job_id: str,
        commands: list[scripts.Command],
        *,
        done: Sequence[bytes] = (),
        retry: Sequence[tuple[bytes, int, bytes]] = (),
        dead: Sequence[tuple[bytes, bytes]] = (),
        failed: int = 0,
        repeat_of: str = "done",
    ) -> None:
        """Send ``commands``, then the ack of one outcome of ``job_id``, in one round
        trip; drop the claim's lease once its last job is settled.

        Raises:
            LeaseGone: the ack was refused (the job is not held by the claim), unless
                this claim ended the job before as ``repeat_of`` says (``"done"``,
                ``"dead"``): the same call again, its reply lost.
        """
        wid = claim.worker_id
        app = self.app
        argv = ACK.argv(
            app.dead_max_age_ms, app.dead_max_len, failed, wid, 0, done=done, retry=retry, dead=dead
        )
        commands = [
            *commands,
            ACK.command(ACK.keys_for(keys, wid), argv),
            # its progress ends with it (a retry claimed again starts clean)
            (scripts.PLAIN, (), ("HDEL", keys.progress, job_id)),
            (scripts.PLAIN, (), ("SCARD", keys.held(wid))),
        ]
        replies = scripts.call_many(self.client, commands)
        applied, held_left = ACK.parse(replies[-3]), int(replies[-1])
        app.after_ack(self.client, keys.queue, replies[-3], f"HTTP worker {claim.name}")
        if applied:
            if held_left == 1:  # only the sentinel: every job of the claim is settled
                scripts.call_many(self.client, [self._release_all(keys, wid)])
            return
        raw = records.lookup(self.client, keys, job_id)
        record = records.parse(raw) if raw is not None else None
        if record is not None and (record.worker, record.outcome) == (wid, repeat_of):
            return  # ended so by this claim before: the same call again
        raise LeaseGone(_gone(job_id))

    def _ack(
        self, keys: QueueKeys, token: ClaimToken, broken: list[tuple[bytes, str]]
    ) -> scripts.Command:
        wid, app = token.worker_id, self.app
        argv = ACK.argv(app.dead_max_age_ms, app.dead_max_len, 0, wid, 0, broken=broken)
        return ACK.command(ACK.keys_for(keys, wid), argv)

    def _take_back_if_lapsed(self, keys: QueueKeys, wid: str) -> scripts.Command:
        """A reaper's take-back of the claim's jobs, applied by Redis only if its
        lease deadline has passed (a stall is counted against each, as for a Python
        worker that stopped)."""
        argv = RELEASE.argv(wid, ReleaseMode.EXPIRED, self.app.max_stalls)
        return RELEASE.command(RELEASE.keys_for(keys, wid), argv)

    def _release_all(self, keys: QueueKeys, wid: str) -> scripts.Command:
        """Drop the claim's lease (its held set holds none of its jobs any more)."""
        argv = RELEASE.argv(wid, ReleaseMode.UNSTARTED, self.app.max_stalls)
        return RELEASE.command(RELEASE.keys_for(keys, wid), argv)


def _gone(job_id: str) -> str:
    return (
        f"the claim holds job {job_id} no longer: its lease lapsed (the job was handed "
        "back to its queue), or the job was settled already, or the token is not the "
        "one its claim returned"
    )
