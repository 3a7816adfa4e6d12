"""The read side's script: ``job_info``, what Redis holds of one job, for fastq and
for clients in any language (docs/protocol.md, "Reading a job back")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from fastq.protocol.contracts.base import Contract
from fastq.protocol.keys import QueueKeys

# the version of job_info's reply this code reads (its first item)
JOB_INFO_VERSION = 1
# the fields of a reply that are integers (times in ms, counts); the others are
# strings, and ``tags`` a list of them
_INTS = frozenset(
    {
        "enqueued_ms",
        "attempts",
        "failed_ms",
        "due_ms",
        "lease_until_ms",
        "stalls",
        "cancelled_ms",
        "ended_ms",
        "run_ms",
    }
)


@dataclass(frozen=True)
class JobInfoReply:
    """``job_info``'s reply: the job's ``state`` and the ``fields`` Redis holds of it
    (by the names of the script's header; times in ms). ``state`` ``stale``: the
    workers given were not those holding leases, nothing was read, and ``workers``
    are those to call again with."""

    state: str
    fields: dict[str, Any] = field(default_factory=dict)
    workers: list[str] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return self.state == "stale"


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _JobInfo(Contract[JobInfoReply]):
    keys = (
        "jobs",
        "scheduled",
        "dead",
        "broken",
        "stalls",
        "poison",
        "progress",
        "cancelled",
        "links",
        "records",
        "records_old",
        "leases",
        "result",
    )
    keys_rest = "held"
    argv_names = ("workers",)
    argv_rest = "rest"

    def keys_for(self, k: QueueKeys, job_id: Optional[str] = None) -> list[str]:
        """The fixed KEYS of a call for ``job_id`` (the second argument: a job's, not
        a worker's, as its own key ``result:<id>`` is among them); the held sets of
        the workers follow them."""
        if job_id is None:
            raise TypeError("job_info: its KEYS need a job id")
        return [k.result(job_id) if attr == "result" else getattr(k, attr) for attr in self.keys]

    def argv(self, workers: Sequence[str], job_id: str) -> list[Any]:
        """``workers``: every worker in the queue's leases, whose held sets follow the
        KEYS (``keys_for(k, job_id=...)`` and ``k.held(w)`` of each)."""
        return [len(workers), *workers, job_id]

    def parse(self, raw: Any) -> JobInfoReply:
        """Raises ValueError for a reply of another version than this code reads."""
        if not raw or int(raw[0]) != JOB_INFO_VERSION:
            raise ValueError(
                f"job_info replied version {raw[0] if raw else None!r}, "
                f"not {JOB_INFO_VERSION}: fastq and its scripts differ"
            )
        state = _text(raw[1])
        fields: dict[str, Any] = {}
        for i in range(2, len(raw) - 1, 2):
            name, value = _text(raw[i]), raw[i + 1]
            if name == "tags" or name == "workers":
                value = [_text(v) for v in value]
            elif name in _INTS:
                value = int(value)
            elif name not in ("envelope", "progress", "result"):  # JSON stays bytes
                value = _text(value)
            fields[name] = value
        workers = fields.pop("workers", []) if state == "stale" else []
        return JobInfoReply(state, fields, workers)


JOB_INFO = _JobInfo("job_info")
