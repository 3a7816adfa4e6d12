"""Jobs whose name the worker's app does not register: a rolling deploy's, perhaps.

While a deploy rolls, a worker of the old code may claim a job that only the new
code registers. Such a job goes back to its queue with a delay (through the ack's
retry section; its attempts stay as they are), to be claimed again, by a worker of
the new code once one runs, for a grace period (``App(unknown_job_grace_s=...)``,
``--unknown-job-grace``; 5 minutes by default); only past it is the job broken,
as a job of a name no worker knows ("unknown job name ...").

The grace counts from when a worker first met the job unknown, on Redis' clock
(the claim's): the time is written into the envelope (``unknown_since``, a field
only workers write, docs/protocol.md), so every worker of every host counts from
the same instant, whatever its own clock says. The delay grows (1 s, then half the
time the job has waited, at most 30 s), so that old workers do not spin on it.
Each name is logged once per process (a WARNING naming the queue and when its
first job becomes broken).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastq._accel import codec
from fastq.app import DEFAULT_UNKNOWN_JOB_GRACE_S
from fastq.validate import check_delay_s

__all__ = ["DEFAULT_UNKNOWN_JOB_GRACE_S", "UNKNOWN_SINCE", "UnknownJobs", "delay_ms"]

log = logging.getLogger("fastq.worker")

# the envelope field (ms, Redis' clock) of when a worker first met the job unknown
UNKNOWN_SINCE = "unknown_since"
FIRST_DELAY_MS = 1_000
MAX_DELAY_MS = 30_000


def delay_ms(waited_ms: int, left_ms: int) -> int:
    """How long a job unknown for ``waited_ms`` stays away before its next claim:
    1 s, then half what it has waited (the delays grow by half), at most 30 s, and
    no later than its grace ends (``left_ms`` from now), but never 0."""
    return max(1, min(MAX_DELAY_MS, max(FIRST_DELAY_MS, waited_ms // 2), left_ms))


class UnknownJobs:
    """Sorts a batch's jobs of unknown names: back to the queue, or broken.

    Args:
        grace_s: how long a job may stay unknown before it is broken; 0: at once.
        who: the worker, as its log lines name it.
    """

    def __init__(self, grace_s: float, who: str) -> None:
        self.grace_ms = int(check_delay_s(grace_s, "unknown_job_grace_s") * 1000)
        self.who = who
        self._said: set[str] = set()  # names logged already

    def sort(
        self, unknown: list[tuple[bytes, str, dict[str, Any]]], queue: str, now_ms: int
    ) -> tuple[list[tuple[bytes, int, bytes]], list[tuple[bytes, str]]]:
        """What becomes of ``unknown`` (``codec.decode_claim``'s), claimed from
        ``queue`` when Redis' clock said ``now_ms``: ``(retry, broken)``, records of
        the ack's retry (id, delay_ms, envelope) and broken (id, reason) sections."""
        retry: list[tuple[bytes, int, bytes]] = []
        broken: list[tuple[bytes, str]] = []
        grace_ms = self.grace_ms
        for job_id, name, env in unknown:
            since = env.get(UNKNOWN_SINCE)
            if type(since) is not int or since > now_ms:  # first met (or a bogus value)
                since = now_ms
            waited_ms = now_ms - since
            if waited_ms >= grace_ms:
                broken.append((job_id, self._reason(name, waited_ms)))
                continue
            envelope = codec.update_envelope(env, {UNKNOWN_SINCE: since})
            retry.append((job_id, delay_ms(waited_ms, grace_ms - waited_ms), envelope))
            if name not in self._said:
                self._said.add(name)
                self._say(name, queue, job_id, since + grace_ms - now_ms)
        return retry, broken

    def _reason(self, name: str, waited_ms: int) -> str:
        if self.grace_ms == 0:
            return f"unknown job name {name!r}"
        return (
            f"unknown job name {name!r}: not registered by the workers that claimed it "
            f"in {waited_ms / 1000:.0f} s (the grace period, unknown_job_grace_s, is "
            f"{self.grace_ms / 1000:g} s)"
        )

    def _say(self, name: str, queue: str, job_id: bytes, left_ms: int) -> None:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() + left_ms / 1000))
        log.warning(
            "%s: job name %r of queue %s is not registered in this worker's app (a newer "
            "deploy's?): its jobs go back to the queue with a delay, and are broken if no "
            "worker runs them within %g s; job %s is broken at %s",
            self.who,
            name,
            queue,
            self.grace_ms / 1000,
            job_id.decode(errors="replace"),
            at,
        )
