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

Only a worker whose app registers an at-most-once job looks at all, and only a
batch holding one pays for the take.
"""

from __future__ import annotations

import logging

from fastq.batch import Claim, Outcomes, RoundTrip
from fastq.redis_faults import REDIS_ERRORS
from fastq.runner import Runnable, SyncRunner

log = logging.getLogger("fastq.worker")


class AtMostOnce:
    """Runs the batches that hold at-most-once jobs, for one worker."""

    def __init__(self, rt: RoundTrip, runner: SyncRunner, who: str) -> None:
        self.rt = rt
        self.runner = runner
        self.who = who

    @staticmethod
    def wanted(runnable: list[Runnable]) -> list[bytes]:
        """The ids of the at-most-once jobs of a batch."""
        return [job[0] for job in runnable if job[1].at_most_once]

    def run(
        self, claim: Claim, runnable: list[Runnable], wanted: list[bytes], out: Outcomes, index: int
    ) -> int:
        """Take ``wanted`` (the batch's at-most-once jobs), then run the batch: its
        other jobs and the at-most-once jobs taken, in their order, recording the
        outcomes in ``out``. Returns how many jobs started.

        Raises:
            whatever the runner lets through (HardStop...), after the outcomes are
            recorded and the taken jobs never started are handed back.
        """
        queue = claim.queue
        try:
            taken = set(self.rt.take(queue, wanted))
        except REDIS_ERRORS as exc:
            # not run: those still held go back with the next round trip; any the take
            # removed before its reply was lost are lost (never run, never twice)
            log.warning(
                "%s: could not take %d at-most-once jobs of %s (%s); they are handed back "
                "unstarted", self.who, len(wanted), queue, exc,
            )  # fmt: skip
            out.unstarted.extend(wanted)
            taken = set()
        skipped = set(wanted) - taken  # no longer held (a lapsed lease): queued again
        if skipped:
            log.info(
                "%s: %d at-most-once jobs of %s were no longer its own; not run here",
                self.who, len(skipped), queue,
            )  # fmt: skip
            runnable = [job for job in runnable if job[0] not in skipped]
        if not taken:
            return self.runner.run(runnable, out, index, queue)
        reply = claim.reply
        envelopes = {i: e for i, e in zip(reply.ids, reply.envelopes) if i in taken}
        batch = Outcomes()
        try:
            return self.runner.run(runnable, batch, index, queue)
        finally:
            self._settle(batch, taken, envelopes, out, queue)

    def _settle(
        self,
        batch: Outcomes,
        taken: set[bytes],
        envelopes: dict[bytes, bytes],
        out: Outcomes,
        queue: str,
    ) -> None:
        """Move a batch's outcomes into ``out``, those of taken jobs to its taken_*
        fields, and the taken jobs never started to its give_back."""
        for job_id in batch.done:
            if job_id in taken:
                out.taken_done += 1
            else:
                out.done.append(job_id)
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
                        self.who, job_id.decode(), queue,
                    )  # fmt: skip
                else:
                    kept.append(job_id)
