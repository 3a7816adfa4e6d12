"""The error of an enqueue that Redis took only part of, or none of: which ids are
in, which are not, and the idempotent retry that adds only the missing ones."""

from __future__ import annotations

from fastq.connection.faults import Fault, classify
from fastq.connection.url import mask_url
from fastq.errors import EnqueueError, EnqueueInterrupted, FastqError


def blast_error(
    redis_url: str,
    ids: list[str],
    written: list[str],
    cause: BaseException,
    *,
    sent: bool,
    again: str = "job_ids=exc.ids",
) -> EnqueueError:
    """The EnqueueError of a blast that Redis took only part of (or none);
    ``again``: the retry's argument the message names."""
    done = set(written)
    not_written = [job_id for job_id in ids if job_id not in done]
    fault = classify(cause)
    if isinstance(cause, FastqError) and cause.__cause__ is not None:
        fault = classify(cause.__cause__) or fault
    how = fault.value if fault is not None else "error"
    retry = f"; retry with {again} (idempotent)"
    url = mask_url(redis_url)
    if fault is Fault.UNAVAILABLE:
        maybe = "may or may not have gone in" if sent else "did not go in"
        what = f"{len(written)} of {len(ids)} jobs are in, the other {len(not_written)}"
        if len(ids) == 1 and not written:  # an enqueue's: the id to retry with
            what = f"job {ids[0]}"
        return EnqueueInterrupted(
            f"cannot reach Redis at {url} ({cause}): {what} {maybe}{retry}",
            ids=ids,
            written=written,
            not_written=not_written,
            fault=how,
        )
    return EnqueueError(
        f"Redis at {url} took {len(written)} of {len(ids)} jobs, "
        f"{len(not_written)} did not go in ({how}: {cause}){retry}",
        ids=ids,
        written=written,
        not_written=not_written,
        fault=how,
    )
