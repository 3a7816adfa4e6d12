"""At-most-once jobs (``@app.job(delivery="at_most_once")``): taken out of the
queue before they run, so that none ever runs twice.

Before any job of a batch runs, the batch's at-most-once jobs are taken
(``take.lua``: each leaves this worker's held set and its envelope is deleted) in
one call whose reply the worker waits for; only the jobs that reply confirms run.
From then on nothing brings them back: a failure, ``Retry`` or timeout buries them
(the dead set, for inspection), and a hand-back, a reaper or a stalled worker moves
only jobs still held. So:

- a worker that dies before the take leaves them queued (they never ran);
- one that dies after it loses those it had not finished: the trade-off;
- a stop (graceful, or the operator's second signal) hands back, once, those it
  took and never started; the one in hand when a hard stop lands is not run again.

Their counts are exact though a request is sent again after a lost reply: the
successes of each batch go out as a numbered part (``seq``, growing), and
``ack_taken`` counts a worker's part only if its number is above the highest it
counted; a death or a quarantine counts as it is new in the dead or broken set.

Only a worker whose app registers an at-most-once job looks at all, and only a
batch holding one pays for the take.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Optional

from fastq.connection.faults import REDIS_ERRORS
from fastq.job import Runnable
from fastq.protocol.outcomes import Outcomes
from fastq.runners.sync import SyncRunner
from fastq.worker.roundtrip import Claim, RoundTrip

log = logging.getLogger("fastq.worker")


@dataclass
class Taken:
    """The at-most-once jobs of a batch after their take."""

    ids: set[bytes]  # taken: they run, and ack_taken settles them
    envelopes: dict[bytes, bytes]  # theirs: to give back any that a stop leaves unstarted
    unstarted: list[bytes]  # the take failed: not run, handed back unstarted if still held


class AtMostOnce:
    """Takes and runs the at-most-once jobs of a worker's batches."""

    def __init__(self, rt: RoundTrip, runner: SyncRunner, who: str) -> None:
        self.rt = rt
        self.runner = runner
        self.who = who
        # the number of the last part of successes: from the clock (µs), so that it
        # grows past what a worker of a reused id counted before
        self.seq = time.time_ns() // 1000

    def take(
        self, claim: Claim, runnable: list[Runnable]
    ) -> tuple[list[Runnable], Optional[Taken]]:
        """Take the batch's at-most-once jobs out of the queue, waiting for the
        reply. Returns the jobs to run (its other jobs, and the at-most-once jobs
        taken, in their order) and what was taken (None: the batch has no
        at-most-once job)."""
        wanted = [job[0] for job in runnable if job[1].at_most_once]
        if not wanted:
            return runnable, None
        queue = claim.queue
        try:
            ids = set(self.rt.take(queue, wanted))
        except REDIS_ERRORS as exc:
            # not run: those still held go back with the next round trip; any the take
            # removed before its reply was lost are lost (never run, never twice)
            log.warning(
                "%s: could not take %d at-most-once jobs of %s (%s); they are handed back "
                "unstarted",
                self.who,
                len(wanted),
                queue,
                exc,
            )
            others = [job for job in runnable if not job[1].at_most_once]
            return others, Taken(set(), {}, wanted)
        if len(ids) < len(wanted):  # no longer held (a lapsed lease): queued again
            log.info(
                "%s: %d at-most-once jobs of %s were no longer its own; not run here",
                self.who,
                len(wanted) - len(ids),
                queue,
            )
            runnable = [job for job in runnable if not job[1].at_most_once or job[0] in ids]
        reply = claim.reply
        envelopes = {i: e for i, e in zip(reply.ids, reply.envelopes) if i in ids}
        return runnable, Taken(ids, envelopes, [])

    def run(
        self, runnable: list[Runnable], taken: Taken, out: Outcomes, index: int, queue: str
    ) -> int:
        """Run a batch some of whose at-most-once jobs were taken, recording the
        outcomes in ``out``. Returns how many jobs started.

        Raises:
            whatever the runner lets through (HardStop...), after the outcomes are
            recorded and the taken jobs never started are set to be handed back.
        """
        batch = Outcomes()
        try:
            # not cut from another thread: a taken job cut would never be given back
            return self.runner.run(runnable, batch, index, queue, cuttable=False)
        finally:
            self._settle(batch, taken, out, queue)

    def _settle(self, batch: Outcomes, taken_jobs: Taken, out: Outcomes, queue: str) -> None:
        """Move a batch's outcomes into ``out``, those of taken jobs to its taken_*
        fields, and the taken jobs never started to its give_back."""
        taken, envelopes = taken_jobs.ids, taken_jobs.envelopes
        done = 0
        if batch.runs:  # for the records of both kinds
            out.runs.update(batch.runs)
        for job_id in batch.done:
            if job_id in taken:
                done += 1
                out.taken_done_ids.append(job_id)
            else:
                out.done.append(job_id)
        if done:
            self.seq += 1
            out.taken_done.append((self.seq, done))
        # settle_failure never retries an at-most-once job
        out.retry += batch.retry
        for job_id, env in batch.dead:
            (out.taken_dead if job_id in taken else out.dead).append((job_id, env))
        for job_id, reason in batch.broken:
            if job_id in taken:
                out.taken_broken.append((job_id, reason, envelopes[job_id]))
            else:
                out.broken.append((job_id, reason))
        out.failed += batch.failed
        out.results += batch.results
        out.progress_ended += batch.progress_ended
        for job_id in batch.unstarted:
            if job_id in taken:
                out.give_back.append((job_id, envelopes[job_id]))
            else:
                out.unstarted.append(job_id)
        for ids, kept in ((batch.stalled, out.stalled), (batch.interrupted, out.interrupted)):
            for job_id in ids:
                if job_id in taken:
                    log.warning(
                        "%s: at-most-once job %s of %s was interrupted; it is not run again",
                        self.who,
                        job_id.decode(),
                        queue,
                    )
                else:
                    kept.append(job_id)
