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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

import redis

from fastq import retry
from fastq._accel import codec
from fastq.policy import JobPolicy
from fastq.protocol import control, records, scripts
from fastq.protocol.contracts import ACK, CLAIM, EXTEND, RELEASE, ReleaseMode
from fastq.protocol.keys import QueueKeys, logical_queue, shard_names
from fastq.protocol.results import encode_result, send_progress, store_commands
from fastq.runners.settle import failure_fields
from fastq.serve.api.claim_token import (
    SECRET_BYTES,
    ClaimToken,
    LeaseGone,
    check_claim,
    check_failure,
    check_id,
    kind,
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
    ) -> tuple[list[ClaimedJob], Optional[float]]:
        """Lease up to ``max_jobs`` ready jobs of ``queue`` (of each of its shards in
        turn, until enough) to a new claim of worker ``name``, for ``lease_s``.

        Returns:
            The jobs; and, when none came, in how many seconds a claim could find
            some with no wake-up (a scheduled job due, a rate limit's next token),
            or None.

        Raises:
            ValueError: a wrong queue name, ``max``, ``lease_s`` or ``worker``.
        """
        check_queue(queue)
        n, lease_ms, name = check_claim(max_jobs, lease_s, name)
        shards = self._shards(queue)
        start = random.randrange(len(shards))  # shards in turn, each claim elsewhere first
        secret = secrets.token_hex(SECRET_BYTES)
        jobs: list[ClaimedJob] = []
        due_in_ms: Optional[int] = None
        for physical in shards[start:] + shards[:start]:
            token = ClaimToken(physical, lease_ms, name, secret)
            taken, due_ms = self._claim_shard(self.app.keys(physical), token, n - len(jobs))
            jobs += taken
            if due_ms is not None:
                due_in_ms = due_ms if due_in_ms is None else min(due_in_ms, due_ms)
            if len(jobs) >= n:
                break
        return jobs, None if jobs or due_in_ms is None else due_in_ms / 1000

    def wait(self, queue: str, timeout_s: float) -> bool:
        """Block until a job may be ready on ``queue`` (a wake-up on any of its
        shards) or ``timeout_s`` passes; whether a wake-up came."""
        keys = [self.app.keys(physical) for physical in self._shards(queue)]
        return control.wait_for_wake(self.client, keys, timeout_s)

    def give_back(self, jobs: Sequence[ClaimedJob]) -> None:
        """Hand the jobs of a claim nobody will work on (its client went away before
        the reply) back to their queues at once, with no stall counted."""
        claims = {job.token: ClaimToken.parse(job.token) for job in jobs}
        scripts.call_many(
            self.client,
            [self._release_all(self.app.keys(c.queue), c.worker_id) for c in claims.values()],
        )

    def _shards(self, queue: str) -> list[str]:
        app = self.app
        return shard_names(queue, app.shard_counts.count(self.client, app.namespace, queue))

    def _claim_shard(
        self, keys: QueueKeys, token: ClaimToken, n: int
    ) -> tuple[list[ClaimedJob], Optional[int]]:
        wid = token.worker_id
        argv = CLAIM.argv(wid, n, token.lease_ms, PROMOTE_MAX)
        reply = CLAIM.call(self.client, CLAIM.keys_for(keys, wid), argv)
        if not len(reply):
            due = reply.next_due_ms
            return [], (max(0, due - reply.now_ms) if due >= 0 else None)
        runnable, broken, _ = reply.decode(_ANY_NAME)
        if broken:
            # quarantined as a Python worker does: the scripts' broken set, with why
            commands = [self._ack(keys, token, broken=broken)]
            if not runnable:  # nothing left under this claim's lease: drop it
                commands.append(self._release_all(keys, wid))
            scripts.call_many(self.client, commands)
        shown = str(token)
        jobs = [
            ClaimedJob(job_id.decode(), name, args, kwargs, attempt, shown)
            for job_id, name, args, kwargs, attempt, _ in runnable
        ]
        return jobs, (None if jobs else 0)

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

    # -- ack: done and fail, one or many --------------------------------------------

    def ack(
        self, queue: Optional[str], done: Sequence[Any], fail: Sequence[Any]
    ) -> tuple[list[AckAnswer], list[AckAnswer]]:
        """Settle many claimed jobs at once, as a pool child acks its batch: the
        ``done`` entries (``{"id", "token", "result"?, "result_ttl_s"?}``) and the
        ``fail`` entries (``{"id", "token", "error", "retry"?, "traceback"?}``), of
        claims on ``queue`` (None: any). One round trip, two when a result is kept
        or a failure settled (the held jobs' envelopes are read first), with one
        ``ack.lua`` call per claim of the request; then ``App.after_ack``.

        A ``done`` is retried by its policy, or dead, as :meth:`fail` says; an
        entry whose claim holds the job no longer is refused (``lease_gone``, or
        ``unknown_job`` when the queue never held such a job, or holds it no more
        and kept no record) and changes nothing, while the others apply. The same
        ``done`` (or a ``fail`` that ended the job dead) sent again after it went
        through succeeds again and changes nothing.

        Returns:
            An answer per entry of ``done``, then of ``fail``, in their order.

        Raises:
            ValueError: a malformed entry (naming it); nothing is applied.
        """
        tokens: dict[object, ClaimToken] = {}  # the jobs of a claim share its token
        dones = [_done_entry(i, e, queue, tokens) for i, e in enumerate(done)]
        fails = [_fail_entry(i, e, queue, tokens) for i, e in enumerate(fail)]
        entries: list[_Entry] = [*dones, *fails]
        if not entries:
            raise ValueError("an ack must settle at least one job")
        if len(entries) > MAX_ACK:
            raise ValueError(f"an ack settles at most {MAX_ACK} jobs, not {len(entries)}")
        seen: set[str] = set()
        for entry in entries:
            if entry.id in seen:
                raise ValueError(f"job {entry.id} is settled twice in one ack")
            seen.add(entry.id)
        claims: dict[str, _ClaimAck] = {}
        for entry in entries:
            wid = entry.claim.worker_id
            if wid not in claims:
                claims[wid] = _ClaimAck(entry.claim, self.app.keys(entry.claim.queue))
            claims[wid].entries.append(entry)
        self._read_held(claims)
        self._send_acks(claims)
        return [e.answer() for e in dones], [e.answer() for e in fails]

    def _read_held(self, claims: dict[str, _ClaimAck]) -> None:
        """Before the ack, where a held job's envelope or its result is needed:
        whether each such job is held (a lapsed lease taken back first), and the
        envelope of each failure; decide the failures' outcomes."""
        commands: list[scripts.Command] = []
        asked: list[_Entry] = []
        for c in claims.values():
            needs = [e for e in c.entries if e.error is not None or e.has_result]
            if not needs:
                continue
            c.took_back = True
            commands.append(self._take_back_if_lapsed(c.keys, c.claim.worker_id))
            for e in needs:
                commands.append(
                    (scripts.PLAIN, (), ("SISMEMBER", c.keys.held(c.claim.worker_id), e.id))
                )
                if e.error is not None:
                    commands.append((scripts.PLAIN, (), ("HGET", c.keys.jobs, e.id)))
                asked.append(e)
        if not commands:
            return
        replies = iter(scripts.call_many(self.client, [cmd for cmd in commands]))
        for c in claims.values():
            if c.took_back:
                next(replies)  # the take-back's
            for e in c.entries:
                if e not in asked:
                    continue
                e.held = bool(int(next(replies)))
                if e.error is not None:
                    raw = next(replies)
                    if e.held:
                        e.outcome = self._fail_outcome(e, raw)

    def _fail_outcome(self, e: _Entry, raw: Optional[bytes]) -> tuple[str, Any]:
        bid = e.id.encode()
        if raw is None:  # cancelled while held: the ack drops it and counts it cancelled
            return "dead", (bid, b"{}")
        decoded, _, _ = codec.decode_claim([bid, raw], 0, _ANY_NAME)
        env: dict[str, Any] = decoded[0][5] if decoded else {}
        attempt = decoded[0][4] if decoded else 1
        assert e.error is not None
        outcome = self._failure(env, attempt, e.error, e.traceback, e.retry)
        if outcome[0] == "retry":
            return "retry", (bid, outcome[1], outcome[2])
        return "dead", (bid, outcome[2])

    def _send_acks(self, claims: dict[str, _ClaimAck]) -> None:
        """One ``ack.lua`` call per claim (with the results to keep before it, and
        the lapsed lease taken back if not yet), in one round trip; then what the
        acks left to do, the leases of claims fully settled dropped, and the
        answers of jobs whose fate the acks' counts leave open looked up."""
        app, commands = self.app, []
        for c in claims.values():
            wid, keys = c.claim.worker_id, c.keys
            if not c.took_back:
                commands.append(self._take_back_if_lapsed(keys, wid))
            done: list[bytes] = []
            retry: list[tuple[bytes, int, bytes]] = []
            dead: list[tuple[bytes, bytes]] = []
            for e in c.entries:
                if e.held is False or e.outcome is None:  # a done; or refused: stale
                    done.append(e.id.encode())
                elif e.outcome[0] == "retry":
                    retry.append(e.outcome[1])
                else:
                    dead.append(e.outcome[1])
                if e.held and e.has_result:
                    # the result before the ack that deletes the job (a waiter that
                    # finds the job gone finds its result); only once the job is
                    # known held, so a refused done keeps nothing
                    for cmd in store_commands(keys, e.id.encode(), *e.result):
                        commands.append((scripts.PLAIN, (), cmd))
            failed = len(retry) + len(dead)
            argv = ACK.argv(
                app.dead_max_age_ms,
                app.dead_max_len,
                failed,
                wid,
                0,
                done=done,
                retry=retry,
                dead=dead,
            )
            commands += [
                ACK.command(ACK.keys_for(keys, wid), argv),
                # their progress ends with them (a retry claimed again starts clean)
                (scripts.PLAIN, (), ("HDEL", keys.progress, *[e.id for e in c.entries])),
                (scripts.PLAIN, (), ("SCARD", keys.held(wid))),
            ]
            c.ack_at = len(commands) - 3
        replies = scripts.call_many(self.client, commands)
        drop: list[scripts.Command] = []
        for c in claims.values():
            reply, held_left = replies[c.ack_at], int(replies[c.ack_at + 2])
            app.after_ack(self.client, c.keys.queue, reply, f"HTTP worker {c.claim.name}")
            unsure = c.settle(ACK.parse(reply))
            if unsure:
                self._look_up(c, unsure)
            if held_left == 1 and any(e.applied for e in c.entries):
                drop.append(self._release_all(c.keys, c.claim.worker_id))
        if drop:  # only the sentinel left: every job of the claim is settled
            scripts.call_many(self.client, drop)

    def _look_up(self, c: _ClaimAck, unsure: list[_Entry]) -> None:
        """The answers the ack's count left open: a job this claim ended before as
        asked (the same call again, its reply lost) is answered as applied; one the
        queue holds (or recorded) is ``lease_gone``; else ``unknown_job``."""
        wid = c.claim.worker_id
        raws = records.look(self.client, c.keys, [e.id for e in unsure])
        exists = scripts.call_many(
            self.client,
            [(scripts.PLAIN, (), ("HEXISTS", c.keys.jobs, e.id)) for e in unsure],
        )
        for e, raw, there in zip(unsure, raws, exists):
            record = records.parse(raw) if raw is not None else None
            repeat_of = "done" if e.error is None else "dead"
            if record is not None and (record.worker, record.outcome) == (wid, repeat_of):
                e.applied, e.refused, e.outcome = True, None, (repeat_of, None)
            elif record is None and not int(there):
                e.refused = "unknown_job"
            else:
                e.refused = "lease_gone"

    # -- the one-job calls: an ack of one entry --------------------------------------

    def done(
        self,
        job_id: str,
        token: object,
        result: object = None,
        has_result: bool = False,
        result_ttl_s: object = None,
    ) -> None:
        """Acknowledge ``job_id`` as done (an :meth:`ack` of one); with
        ``has_result``, keep ``result`` (JSON) as a Python job's return value is
        kept, for ``result_ttl_s`` (default: a day).

        Raises:
            ValueError: a malformed token, or a result JSON cannot keep.
            LeaseGone: the claim holds the job no longer: nothing is applied, and the
                late ack is counted (``stale_acks``).
        """
        check_id(job_id)
        ClaimToken.parse(token)  # its own message, not an ack entry's
        entry: dict[str, Any] = {"id": job_id, "token": token}
        if has_result:
            entry["result"] = result
        if result_ttl_s is not None:
            entry["result_ttl_s"] = result_ttl_s
        answer = self.ack(None, [entry], [])[0][0]
        if not answer["ok"]:
            raise LeaseGone(answer["message"])

    def fail(
        self,
        job_id: str,
        token: object,
        error: object,
        retry_it: object = True,
        traceback: object = None,
    ) -> str:
        """Settle ``job_id`` as failed with ``error`` (an :meth:`ack` of one):
        retried after the backoff while its policy allows (the envelope's
        ``retries``, ``backoff`` and ``age_limit_ms``, else those of the app's
        registered job of that name, else fastq's defaults: 5 retries, exponential
        backoff), else, or with ``retry_it`` false, dead with its error. Returns
        ``"retry"`` or ``"dead"``.

        Raises:
            ValueError: a malformed token, error, retry or traceback.
            LeaseGone: the claim holds the job no longer (counted as a stale ack).
        """
        check_id(job_id)
        ClaimToken.parse(token)  # their own messages, not an ack entry's
        check_failure(error, retry_it, traceback)
        entry = {"id": job_id, "token": token, "error": error, "retry": retry_it}
        if traceback is not None:
            entry["traceback"] = traceback
        answer = self.ack(None, [], [entry])[1][0]
        if not answer["ok"]:
            raise LeaseGone(answer["message"])
        outcome: str = answer["outcome"]
        return outcome

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


# Jobs one ack settles at most (its body is read whole, and one script call settles
# a claim's share of it).
MAX_ACK = 1000

# One entry's answer: {"id", "ok": true, "outcome"?} or {"id", "ok": false, "error",
# "message"}.
AckAnswer = dict[str, Any]

_DONE_FIELDS = frozenset({"id", "token", "result", "result_ttl_s"})
_FAIL_FIELDS = frozenset({"id", "token", "error", "retry", "traceback"})


@dataclass
class _Entry:
    """One job of an ack, checked, and what became of it."""

    id: str
    claim: ClaimToken
    # a done's result kept: (encoded, ttl_ms)
    result: tuple[bytes, int] = (b"", 0)
    has_result: bool = False
    # a failure's (error None: a done)
    error: Optional[str] = None
    retry: bool = True
    traceback: Optional[str] = None
    # read before the ack (None: not read)
    held: Optional[bool] = None
    # a failure's outcome: ("retry", (id, delay_ms, envelope)) or ("dead", (id, env))
    outcome: Optional[tuple[str, Any]] = None
    applied: bool = False
    refused: Optional[str] = None

    def answer(self) -> AckAnswer:
        if self.refused is not None:
            message = _gone(self.id) if self.refused == "lease_gone" else _unknown(self.id)
            return {"id": self.id, "ok": False, "error": self.refused, "message": message}
        if self.error is None:
            return {"id": self.id, "ok": True}
        assert self.outcome is not None
        return {"id": self.id, "ok": True, "outcome": self.outcome[0]}


@dataclass
class _ClaimAck:
    """The entries of one claim in an ack: one ``ack.lua`` call."""

    claim: ClaimToken
    keys: QueueKeys
    entries: list[_Entry] = field(default_factory=list)
    took_back: bool = False
    ack_at: int = 0

    def settle(self, applied: int) -> list[_Entry]:
        """Mark the entries ``ack.lua`` applied (its count: ``applied``); return
        those whose fate the count leaves open. A job read as held before the ack
        is applied (only a lapse the take-back already saw could take it away); one
        read as not held is not; a done not read is applied when every one
        expected was, and looked up otherwise."""
        unread = [e for e in self.entries if e.held is None]
        held = [e for e in self.entries if e.held]
        for e in self.entries:
            if e.held is False:
                e.refused = "lease_gone"
        for e in held:
            e.applied = True
        if applied >= len(held) + len(unread):
            for e in unread:
                e.applied = True
            unsure = []
        else:
            unsure = unread
        # a refusal read before the ack may be the same call again: look it up too
        return unsure + [e for e in self.entries if e.held is False]


def _entry(
    i: int,
    given: object,
    queue: Optional[str],
    what: str,
    fields: frozenset[str],
    tokens: dict[object, ClaimToken],
) -> tuple[dict[str, Any], str, ClaimToken]:
    where = f"{what}[{i}]"
    if not isinstance(given, dict):
        raise ValueError(f"{where} must be an object, not {kind(given)}")
    unknown = sorted(set(given) - fields)
    if unknown:
        raise ValueError(f"{where} has unknown fields: {', '.join(unknown)}")
    job_id = given.get("id")
    if not isinstance(job_id, str):
        raise ValueError(f"{where}.id must be a string, not {kind(job_id)}")
    try:
        check_id(job_id)
        token = given.get("token")
        claim = tokens.get(token) if isinstance(token, str) else None
        if claim is None:
            claim = tokens[token] = ClaimToken.parse(token)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if queue is not None and logical_queue(claim.queue) != queue:
        raise ValueError(f"{where}.token is a claim of another queue, not of {queue}")
    return given, job_id, claim


def _done_entry(
    i: int, given: object, queue: Optional[str], tokens: dict[object, ClaimToken]
) -> _Entry:
    fields, job_id, claim = _entry(i, given, queue, "done", _DONE_FIELDS, tokens)
    entry = _Entry(job_id, claim)
    if "result" in fields:
        try:
            entry.result = _result(fields["result"], fields.get("result_ttl_s"))
        except ValueError as exc:
            raise ValueError(f"done[{i}]: {exc}") from None
        entry.has_result = True
    elif fields.get("result_ttl_s") is not None:
        _result(None, fields["result_ttl_s"])  # checked all the same
    return entry


def _fail_entry(
    i: int, given: object, queue: Optional[str], tokens: dict[object, ClaimToken]
) -> _Entry:
    fields, job_id, claim = _entry(i, given, queue, "fail", _FAIL_FIELDS, tokens)
    error, retry_it, tb = fields.get("error"), fields.get("retry", True), fields.get("traceback")
    try:
        check_failure(error, retry_it, tb)
    except ValueError as exc:
        raise ValueError(f"fail[{i}]: {exc}") from None
    assert isinstance(error, str) and isinstance(retry_it, bool)  # checked above
    return _Entry(
        job_id, claim, error=error, retry=retry_it, traceback=tb if isinstance(tb, str) else None
    )


def check_queue(queue: str) -> None:
    try:
        check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def _result(result: object, result_ttl_s: object) -> tuple[bytes, int]:
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


def _unknown(job_id: str) -> str:
    return f"the queue holds no job {job_id}, nor a record of one: an unknown id"
