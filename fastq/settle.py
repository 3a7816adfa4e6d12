"""What becomes of a job that did not succeed: retried, buried or quarantined."""

from __future__ import annotations

import logging
import random
import time
import traceback
from typing import TYPE_CHECKING, Any, Optional

from fastq._accel import backoff, codec
from fastq.batch import Outcomes
from fastq.errors import Fail, JobTimeout, Retry
from fastq.job import JobPolicy

if TYPE_CHECKING:
    from fastq.job import JobDef

log = logging.getLogger("fastq.worker")


def settle_failure(
    out: Outcomes,
    job_id: bytes,
    target: JobDef[Any],
    args: list[Any],
    kwargs: dict[str, Any],
    attempt: int,
    env: dict[str, Any],
    exc: BaseException,
) -> None:
    """Record in ``out`` the outcome of a job that raised, or returned, ``exc``.

    ``Retry`` reschedules it while attempts remain; ``Fail`` buries it; a
    TypeError from arguments that do not fit the function quarantines it as
    broken; any other exception is retried with backoff while attempts remain
    and it is in ``retry_on`` (a timeout always is), then buried with its
    traceback. ``attempt`` counts this run (1 = the first).
    """
    policy = target.policy
    retries = env.get("retries", policy.retries)  # an envelope may override the policy
    if not isinstance(retries, int):
        retries = policy.retries
    name, shown_id = target.name, job_id.decode()
    if isinstance(exc, Retry):
        if attempt <= retries:
            delay_ms = (
                int(exc.delay_s * 1000) if exc.delay_s is not None else _backoff_ms(policy, attempt)
            )
            fields = {"attempts": attempt, "error": "Retry requested"}
            out.retry.append((job_id, delay_ms, codec.update_envelope(env, fields)))
        else:
            error = f"Retry requested after {attempt} attempts: retries exhausted"
            _bury(out, name, job_id, env, attempt, error, None)
        return
    if isinstance(exc, TypeError) and not target.arg_checker.binds(args, kwargs):
        reason = f"arguments do not fit {name}: {exc}"
        log.error("job %s %s is broken, quarantined: %s", name, shown_id, reason)
        out.broken.append((job_id, reason))
        return
    out.failed += 1
    if isinstance(exc, Fail):
        _bury(out, name, job_id, env, attempt, f"Fail: {exc.reason}", None)
        return
    error = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, (*policy.retry_on, JobTimeout)) and attempt <= retries:
        delay_ms = _backoff_ms(policy, attempt)
        log.warning(
            "job %s %s failed (attempt %d of %d), retrying in %.2fs: %s",
            name, shown_id, attempt, retries + 1, delay_ms / 1000, error,
        )  # fmt: skip
        fields = {"attempts": attempt, "error": error, "traceback": tb, "failed_at": _now_ms()}
        out.retry.append((job_id, delay_ms, codec.update_envelope(env, fields)))
        return
    _bury(out, name, job_id, env, attempt, error, tb, f"failed after {attempt} attempts: {error}")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _backoff_ms(policy: JobPolicy, attempt: int) -> int:
    delay: int = backoff.backoff_ms(
        attempt, policy.backoff_ms, policy.max_backoff_ms, policy.jitter, random.random()
    )
    return delay


def _bury(
    out: Outcomes,
    name: str,
    job_id: bytes,
    env: dict[str, Any],
    attempt: int,
    error: str,
    tb: Optional[str],
    reason: Optional[str] = None,
) -> None:
    """Send a job to the dead set with its ``error``; every death is logged at ERROR
    with its reason (``reason``, else the error)."""
    log.error("job %s %s is dead: %s", name, job_id.decode(), reason or error)
    fields = {"attempts": attempt, "error": error, "traceback": tb, "failed_at": _now_ms()}
    out.dead.append((job_id, codec.update_envelope(env, fields)))
