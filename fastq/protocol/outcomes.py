"""What became of the jobs of one queue since the last round trip: what the next
ack, ack_taken and release calls carry (their ARGV is built here)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from fastq._accel import codec
from fastq.protocol.contracts import ACK, ACK_TAKEN, ReleaseMode


@dataclass
class Outcomes:
    """What became of the jobs of one queue since the last round trip."""

    done: list[bytes] = field(default_factory=list)
    # the runs of done jobs, for their records (codec.encode_runs): id -> run_ms, or
    # (run_ms, attempt) when not its first attempt; none for 0 ms on a first attempt.
    # Set before the id joins a done list (split_off takes those of the ids it takes)
    runs: dict[bytes, Any] = field(default_factory=dict)
    retry: list[tuple[bytes, int, bytes]] = field(default_factory=list)  # id, delay_ms, envelope
    dead: list[tuple[bytes, bytes]] = field(default_factory=list)  # id, envelope with the error
    broken: list[tuple[bytes, str]] = field(default_factory=list)  # id, reason
    failed: int = 0
    unstarted: list[bytes] = field(default_factory=list)  # claimed, never run: hand back
    stalled: list[bytes] = field(default_factory=list)  # interrupted mid-run: hand back
    # how the worker goes down with them ("exited: the job raised SystemExit(3)"),
    # said in the reason of a job buried as poison
    stalled_cause: str = ""
    # the job in hand at an operator's hard stop: back to the front, no stall counted
    interrupted: list[bytes] = field(default_factory=list)
    # return values to keep (result_ttl_s): id, JSON, ttl_ms; each id is also in done
    results: list[tuple[bytes, bytes, int]] = field(default_factory=list)
    # jobs that reported progress and ended: their report is deleted after the ack
    progress_ended: list[bytes] = field(default_factory=list)
    # at-most-once jobs taken out of the queue before they ran (fastq.worker.atmostonce),
    # settled by ack_taken since no worker holds them: how many succeeded (seq, n:
    # numbered parts, so that a part resent counts once), and those buried (id,
    # envelope with the error) or quarantined (id, reason, envelope)
    taken_done: list[tuple[int, int]] = field(default_factory=list)
    taken_done_ids: list[bytes] = field(default_factory=list)  # for their records
    taken_dead: list[tuple[bytes, bytes]] = field(default_factory=list)
    taken_broken: list[tuple[bytes, str, bytes]] = field(default_factory=list)
    # taken jobs a stop left unstarted (id, envelope): handed back to the front by
    # the next request, once: a request whose reply is lost does not give them back
    # (they may have been taken and run by a sibling since), and they are lost
    give_back: list[tuple[bytes, bytes]] = field(default_factory=list)
    # keys of per-key limits that their jobs asked to rest (Retry(slow_key=True)):
    # (formatted key, the job's own limit, rest_ms); the pump rests them
    # (KeyGate.rest) before it writes the request that carries the rest, in which
    # they take no part
    rests: list[tuple[str, Any, int]] = field(default_factory=list)
    # what became of jobs of circuit breakers' keys, in order (formatted key, its
    # CircuitKey, succeeded): the pump reports them (fastq.circuit) as it does rests
    circuit_outcomes: list[tuple[str, Any, bool]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.taken_done
            or self.taken_dead
            or self.taken_broken
            or self.give_back
            or self.done
            or self.retry
            or self.dead
            or self.broken
            or self.unstarted
            or self.stalled
            or self.interrupted
            or self.progress_ended
        )

    def note_done(self, job_id: bytes, run_ms: int, attempt: int) -> None:
        """Job ``job_id`` succeeded, its run ``run_ms`` long, its ``attempt``-th (from 1)."""
        if attempt != 1:
            self.runs[job_id] = (run_ms, attempt)
        elif run_ms > 0:
            self.runs[job_id] = run_ms
        self.done.append(job_id)

    def take_back(self, earlier: Outcomes) -> None:
        """Take back what an unanswered request carried, to send it again ahead of
        what came since: every list but ``give_back``, which may have gone out."""
        self._add(earlier, ahead=True, lists=_RESENT)

    def extend(self, later: Outcomes) -> None:
        """Add what ``later`` recorded (a job's outcome kept aside while its hooks ran)."""
        self._add(later, ahead=False, lists=_LISTS)

    def _add(self, other: Outcomes, ahead: bool, lists: tuple[str, ...]) -> None:
        for name in lists:
            part = getattr(other, name)
            if part:
                mine = getattr(self, name)
                if ahead:
                    mine[:0] = part
                else:
                    mine.extend(part)
        if other.runs:
            self.runs.update(other.runs)
        self.failed += other.failed
        self.stalled_cause = self.stalled_cause or other.stalled_cause

    def split_off(self) -> Outcomes:
        """Move what was recorded so far (but the counts and the at-most-once
        lists) into a new Outcomes, for another thread to send while this one is
        still appended to: each list loses its first items only, so an append
        that lands meanwhile stays here."""
        part = Outcomes()
        for name in _SPLIT:
            mine = getattr(self, name)
            k = len(mine)
            if k:
                setattr(part, name, mine[:k])
                del mine[:k]
        runs = self.runs
        if runs:  # the runs of the done ids taken, set before those joined done
            part.runs = {j: runs.pop(j) for j in part.done if j in runs}
        return part

    def count(self) -> int:
        return len(self.done) + len(self.retry) + len(self.dead) + len(self.broken)

    def ack_argv(
        self,
        dead_max_age_ms: int,
        dead_max_len: int,
        worker_id: str = "",
        epoch: int = 0,
        batch_of: Optional[dict[bytes, str]] = None,
    ) -> list[Any]:
        """The ARGV of an ack of these outcomes, by ``worker_id`` of ``epoch``.
        ``batch_of``: the batch of each job claimed in one (``ClaimReply.decode``'s),
        by which the done ones are grouped, each counted for its batch with no
        lookup; the entries of the jobs acked here leave it (a job sent again,
        its reply lost, is looked up)."""
        done, groups = self.done, []
        if batch_of and done:
            pop = batch_of.pop
            batches = [pop(job_id, None) for job_id in done]
            first = batches[0]
            if first is not None and batches.count(first) == len(batches):
                groups = [(first, len(done))]  # most often: all of one batch
            else:
                by_batch: dict[Optional[str], list[bytes]] = {}
                for job_id, batch_id in zip(done, batches):
                    by_batch.setdefault(batch_id, []).append(job_id)
                rest = by_batch.pop(None, [])
                done = [job_id for ids in by_batch.values() for job_id in ids] + rest
                groups = [(batch_id, len(ids)) for batch_id, ids in by_batch.items() if batch_id]
        if batch_of and (self.retry or self.dead or self.broken):
            ended = [r[0] for r in self.retry] + [r[0] for r in self.dead]
            for job_id in ended + [r[0] for r in self.broken]:
                batch_of.pop(job_id, None)
        return ACK.argv(
            dead_max_age_ms,
            dead_max_len,
            self.failed,
            worker_id,
            epoch,
            groups,
            done,
            self.retry,
            self.dead,
            self.broken,
            codec.encode_runs(done, self.runs),
        )

    def has_taken(self) -> bool:
        return bool(self.taken_done or self.taken_dead or self.taken_broken or self.give_back)

    def ack_taken_argv(self, dead_max_age_ms: int, dead_max_len: int) -> list[Any]:
        """The ARGV of an ack_taken of these outcomes."""
        return ACK_TAKEN.argv(
            dead_max_age_ms,
            dead_max_len,
            self.taken_done,
            self.taken_dead,
            self.taken_broken,
            self.give_back,
            self.taken_done_ids,
            codec.encode_runs(self.taken_done_ids, self.runs),
        )

    def releases(self) -> tuple[tuple[ReleaseMode, list[bytes]], ...]:
        """The jobs to hand back, by release mode."""
        return (
            (ReleaseMode.UNSTARTED, self.unstarted),
            (ReleaseMode.STALLED, self.stalled),
            (ReleaseMode.INTERRUPTED, self.interrupted),
        )


# the lists of outcomes (the count, failed, is added apart)
_LISTS = tuple(f.name for f in dataclasses.fields(Outcomes) if str(f.type).startswith("list"))
# what a request whose reply was lost is sent again with
_RESENT = tuple(name for name in _LISTS if name != "give_back")
# what split_off() moves: not the at-most-once lists (their hand-back goes out once)
_SPLIT = tuple(name for name in _LISTS if not name.startswith(("taken_", "give_back")))
