"""What becomes of a job that did not succeed: retried, buried or quarantined."""

from __future__ import annotations

import logging
import random
import time
import traceback
from typing import TYPE_CHECKING, Any, Optional

from fastq import retry
from fastq._accel import codec
from fastq.errors import Fail, JobTimeout, ResultNotSerializable, Retry
from fastq.protocol.outcomes import Outcomes
from fastq.retry import Backoff

if TYPE_CHECKING:
    from fastq.job import JobDef

log = logging.getLogger("fastq.worker")

# The uniform draw in [0, 1) of curves with jitter (a name of its own, so that a
# test can fix it).
draw = random.random

# What a failure stores in the job's envelope at most: every retry and the dead set
# carry it, and a huge message (an exception holding a whole response) must not
# bloat Redis. A traceback keeps its end, where the exception is.
MAX_ERROR_CHARS = 2_000
MAX_TRACEBACK_CHARS = 16_000


def _failure_fields(attempt: int, error: str, tb: Optional[str]) -> dict[str, Any]:
    """The envelope fields a failure writes, its error and traceback bounded."""
    if len(error) > MAX_ERROR_CHARS:
        cut = len(error) - MAX_ERROR_CHARS
        error = f"{error[:MAX_ERROR_CHARS]}... [{cut:,} more characters cut]"
    if tb is not None and len(tb) > MAX_TRACEBACK_CHARS:
        cut = len(tb) - MAX_TRACEBACK_CHARS
        tb = f"[{cut:,} characters cut] ...{tb[-MAX_TRACEBACK_CHARS:]}"
    return {"attempts": attempt, "error": error, "traceback": tb, "failed_at": _now_ms()}


# the same fields for a failure reported over HTTP (fastq.serve.api.claims)
failure_fields = _failure_fields


def note_circuit(
    out: Outcomes, target: JobDef[Any], args: Any, kwargs: Any, succeeded: bool
) -> None:
    """A job of a circuit breaker's key succeeded or failed: for the circuit's
    report (``out.circuit_outcomes``, sent by the worker's pump once a round trip)."""
    circuit = target.circuit
    if circuit is None:
        return
    key = circuit.key_for(args, kwargs)
    if key is not None:
        out.circuit_outcomes.append((key, circuit, succeeded))


def _rest_key(
    out: Outcomes,
    target: JobDef[Any],
    args: list[Any],
    kwargs: dict[str, Any],
    exc: Retry,
    shown_id: str,
) -> None:
    """A Retry(slow_key=True): the job's key of its per-key limit rests ``delay_s``
    (noted in ``out``; the worker's pump rests it before its next request)."""
    rate_key = target.rate_key
    key = rate_key.key_for(args, kwargs) if rate_key is not None else None
    if rate_key is None or key is None or exc.delay_s is None:
        log.warning(
            "job %s %s: Retry(slow_key=True), but no key rests: the job has no rate_key "
            "(or rate limits are off, as in the test mode)",
            target.name,
            shown_id,
        )
        return
    out.rests.append((key, rate_key.limit, int(exc.delay_s * 1000)))


def _fault_of_the_resource(exc: BaseException, target: JobDef[Any], args: Any, kwargs: Any) -> bool:
    """Whether a failure counts against the job's circuit: an exception (a timeout
    included), not a Retry or Fail the job chose, nor a result it could not keep,
    nor arguments that do not fit it."""
    if isinstance(exc, (Retry, Fail, ResultNotSerializable)):
        return False
    return not (isinstance(exc, TypeError) and not target.arg_checker.binds(args, kwargs))


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

    ``Retry`` reschedules it while attempts remain (after its ``delay_s``, else the
    backoff); ``Fail`` buries it; a TypeError from arguments that do not fit the
    function quarantines it as broken; an exception in ``fail_on`` buries it at
    once; any other is retried with the backoff while attempts remain and it is in
    ``retry_on`` (a timeout always is), then buried with its traceback. A retry
    that would start beyond the job's age limit buries it instead. The envelope's
    overrides (``retries``, ``backoff``, ``age_limit_ms``) take the place of the
    job's own. ``attempt`` counts this run (1 = the first). An at-most-once job has
    no attempt left, whatever its policy: whatever did not succeed is buried.
    """
    policy = target.policy
    name, shown_id = target.name, job_id.decode()
    if target.circuit is not None and _fault_of_the_resource(exc, target, args, kwargs):
        note_circuit(out, target, args, kwargs, False)
    retries = env.get("retries", policy.retries)  # an envelope may override the policy
    if isinstance(retries, float) and retries.is_integer():
        retries = int(retries)  # 3.0 from a producer of another language: enqueue took it
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        # written past the enqueue script, which refuses it
        log.warning(
            "job %s %s: invalid retries in the envelope: %r; the job's own policy applies",
            name,
            shown_id,
            retries,
        )
        retries = policy.retries
    if target.at_most_once:  # taken out of the queue before it ran: never run again
        retries = 0
    if isinstance(exc, Retry):
        if exc.slow_key:
            _rest_key(out, target, args, kwargs, exc, shown_id)
        if attempt <= retries:
            if exc.delay_s is not None:
                delay_ms = int(exc.delay_s * 1000)
                limit_ms = _policy_of(target, env, shown_id)[1]
            else:
                delay_ms, limit_ms = _backoff_ms(target, env, shown_id, attempt)
            too_old = _too_old(env, limit_ms, delay_ms)
            if too_old is not None:
                _bury(out, name, job_id, env, attempt, f"{too_old} (Retry requested)", None)
                return
            fields = {"attempts": attempt, "error": "Retry requested"}
            out.retry.append((job_id, delay_ms, codec.update_envelope(env, fields)))
        else:
            error = f"Retry requested after {_attempts(attempt)}: retries exhausted"
            if target.at_most_once:
                error = "Retry requested: an at-most-once job is never retried"
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
    if policy.fail_on and isinstance(exc, policy.fail_on):
        reason = f"failed at once ({type(exc).__name__} is in fail_on): {error}"
        _bury(out, name, job_id, env, attempt, error, tb, reason)
        return
    if isinstance(exc, (*policy.retry_on, JobTimeout)) and attempt <= retries:
        delay_ms, limit_ms = _backoff_ms(target, env, shown_id, attempt)
        too_old = _too_old(env, limit_ms, delay_ms)
        if too_old is not None:
            _bury(out, name, job_id, env, attempt, f"{too_old}; last error: {error}", tb)
            return
        log.warning(
            "job %s %s failed (attempt %d of %d), retrying in %.2fs: %s",
            name,
            shown_id,
            attempt,
            retries + 1,
            delay_ms / 1000,
            error,
        )
        log.debug("job %s %s: the traceback of attempt %d:\n%s", name, shown_id, attempt, tb)
        fields = _failure_fields(attempt, error, tb)
        out.retry.append((job_id, delay_ms, codec.update_envelope(env, fields)))
        return
    _bury(out, name, job_id, env, attempt, error, tb, f"failed after {_attempts(attempt)}: {error}")


def _attempts(n: int) -> str:
    return "1 attempt" if n == 1 else f"{n} attempts"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _policy_of(
    target: JobDef[Any], env: dict[str, Any], shown_id: str
) -> tuple[Backoff, Optional[int]]:
    """The backoff and age limit (ms) of a job: its envelope's overrides, else its
    own. An unreadable override is logged and the job's own applies."""
    policy = target.policy
    if "backoff" not in env and "age_limit_ms" not in env:
        return policy.backoff, _limit_ms(policy.age_limit_s)
    backoff, limit_ms, warning = retry.resolve(env, policy.backoff, policy.age_limit_s)
    if warning is not None:
        log.warning("job %s %s: %s; the job's own policy applies", target.name, shown_id, warning)
    return backoff, limit_ms


def _limit_ms(age_limit_s: Optional[float]) -> Optional[int]:
    return None if age_limit_s is None else int(age_limit_s * 1000)


def _backoff_ms(
    target: JobDef[Any], env: dict[str, Any], shown_id: str, attempt: int
) -> tuple[int, Optional[int]]:
    """The delay (ms) before the next attempt after run ``attempt`` failed, and
    the age limit (ms) that applies."""
    backoff, limit_ms = _policy_of(target, env, shown_id)
    return backoff.delay_ms(attempt, draw()), limit_ms


def _too_old(env: dict[str, Any], limit_ms: Optional[int], delay_ms: int) -> Optional[str]:
    if limit_ms is None:
        return None
    return retry.age_limit_error(env, limit_ms, _now_ms(), delay_ms)


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
    with its reason (``reason``, else the error) and, as Celery and RQ do, its
    traceback (a retried failure logs one WARNING line, the traceback at DEBUG)."""
    if tb:
        log.error("job %s %s is dead: %s\n%s", name, job_id.decode(), reason or error, tb.rstrip())
    else:
        log.error("job %s %s is dead: %s", name, job_id.decode(), reason or error)
    fields = _failure_fields(attempt, error, tb)
    out.dead.append((job_id, codec.update_envelope(env, fields)))
