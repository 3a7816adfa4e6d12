"""What an HTTP worker's calls carry: the claim's token, and the checks of their
input (each refusal a ``ValueError`` naming the field: HTTP 422, as for every
route, :func:`fastq.serve.api.endpoint.refusal`)."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from fastq.context import encode_progress
from fastq.serve.reply import HTTPError
from fastq.validate import check_job_id, check_physical_queue_name, is_finite

# Jobs one claim takes at most (its reply is read whole), and lease bounds in seconds:
# a lease under a second would lapse between two calls of a slow client; a job longer
# than a day heartbeats.
MAX_CLAIM = 1000
MIN_LEASE_S = 1.0
MAX_LEASE_S = 24 * 3600.0
DEFAULT_LEASE_S = 60.0
# A long-poll claim waits at most this long for jobs (a proxy's read timeout is
# commonly 60 s).
MAX_WAIT_S = 30.0
# A worker's name: what operators see in its worker ids and the jobs' records.
MAX_NAME_CHARS = 64
_NAME = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_NAME_CHARS}}}")
DEFAULT_NAME = "anonymous"
MAX_ERROR_INPUT_CHARS = 100_000  # cut to settle's bound when stored
SECRET_BYTES = 16
_TOKEN = re.compile(
    r"([A-Za-z0-9_.\-#]{1,104}):([0-9]{1,9}):([A-Za-z0-9_.\-]{1,64}):([0-9a-f]{32})"
)


class LeaseGone(HTTPError):
    """The claim no longer holds the job (HTTP 409): its lease lapsed (and was handed
    back), the job was settled already, or the token names no claim of it."""

    def __init__(self, message: str) -> None:
        super().__init__(409, message)


@dataclass(frozen=True)
class ClaimToken:
    """What a token names: the queue (a shard's name for a sharded queue), the
    lease length, the worker's name, and the claim's secret."""

    queue: str
    lease_ms: int
    name: str
    secret: str

    @functools.cached_property
    def worker_id(self) -> str:
        digest = hashlib.sha256(self.secret.encode()).hexdigest()[:32]
        return f"http:{self.name}:{digest}"

    def __str__(self) -> str:
        return f"{self.queue}:{self.lease_ms}:{self.name}:{self.secret}"

    @classmethod
    def parse(cls, token: object) -> ClaimToken:
        """Raises: ValueError, when ``token`` is not one a claim returned."""
        if not isinstance(token, str):
            raise ValueError(f"token must be a string, not {kind(token)}")
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise ValueError("token is not one a claim returned")
        queue, lease_ms, name, secret = match.groups()
        try:
            check_physical_queue_name(queue)
        except ValueError:
            raise ValueError("token is not one a claim returned") from None
        if not MIN_LEASE_S * 1000 <= int(lease_ms) <= MAX_LEASE_S * 1000:
            raise ValueError("token is not one a claim returned")
        return cls(queue, int(lease_ms), name, secret)


def kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def check_claim(max_jobs: object, lease_s: object, name: object) -> tuple[int, int, str]:
    """``(n, lease_ms, name)`` of a claim's input.

    Raises:
        ValueError: naming the field that is wrong.
    """
    if max_jobs is None:
        max_jobs = 1
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int):
        raise ValueError(f"max must be an integer, not {kind(max_jobs)}")
    if not 1 <= max_jobs <= MAX_CLAIM:
        raise ValueError(f"max must be within 1..{MAX_CLAIM}, not {max_jobs}")
    if lease_s is None:
        lease_s = DEFAULT_LEASE_S
    if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)):
        raise ValueError(f"lease_s must be a number of seconds, not {kind(lease_s)}")
    if not (is_finite(lease_s) and MIN_LEASE_S <= lease_s <= MAX_LEASE_S):
        raise ValueError(
            f"lease_s must be within {MIN_LEASE_S:g}..{MAX_LEASE_S:g} seconds, not {lease_s!r}"
        )
    if name is None:
        name = DEFAULT_NAME
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(
            f"worker must be 1 to {MAX_NAME_CHARS} ASCII letters, digits, '_', '.' or '-'"
        )
    return max_jobs, int(lease_s * 1000), name


def check_wait(wait_s: object) -> float:
    """A claim's ``wait_s``: how long it may wait for jobs (0: not at all).

    Raises:
        ValueError: not a number of seconds within 0..MAX_WAIT_S.
    """
    if wait_s is None:
        return 0.0
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)):
        raise ValueError(f"wait_s must be a number of seconds, not {kind(wait_s)}")
    if not (is_finite(wait_s) and 0 <= wait_s <= MAX_WAIT_S):
        raise ValueError(f"wait_s must be within 0..{MAX_WAIT_S:g} seconds, not {wait_s!r}")
    return float(wait_s)


def check_failure(error: object, retry: object, traceback: object) -> None:
    """Check a ``fail`` call's input.

    Raises:
        ValueError: naming the field that is wrong.
    """
    if not isinstance(error, str) or not error:
        raise ValueError(f"error must be a non-empty string, not {kind(error)}")
    if len(error) > MAX_ERROR_INPUT_CHARS:
        raise ValueError(f"error is {len(error)} characters, more than {MAX_ERROR_INPUT_CHARS}")
    if not isinstance(retry, bool):
        raise ValueError(f"retry must be true or false, not {kind(retry)}")
    if traceback is not None and not isinstance(traceback, str):
        raise ValueError(f"traceback must be a string, not {kind(traceback)}")


def check_id(job_id: str) -> None:
    try:
        check_job_id(job_id)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def progress_report(progress: object) -> bytes:
    """A heartbeat's progress as ``set_progress`` stores it.

    Raises:
        ValueError: not a fraction in [0, 1] nor ``{"fraction": f, "meta": m}``.
    """
    fraction, meta = progress, None
    if isinstance(progress, dict):
        unknown = set(progress) - {"fraction", "meta"}
        if unknown or "fraction" not in progress:
            raise ValueError('progress must be a number in [0, 1] or {"fraction": f, "meta": m}')
        fraction, meta = progress["fraction"], progress.get("meta")
    try:
        return encode_progress(fraction, meta)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"progress: {str(exc).removeprefix('set_progress: ')}") from None
