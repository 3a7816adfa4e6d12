"""Redis key names for one queue.

Every key of queue ``q`` carries the hash tag ``{q}`` so that each Lua script
touches a single Redis Cluster slot. Scripts never build key names: they get
every key they touch through KEYS, in the order the ``*_keys`` methods give.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastq.limits import check_queue_name


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a usable queue name: 1 to 100 ASCII letters, digits,
    ``_``, ``.`` or ``-`` (the limits live in :mod:`fastq.limits`).

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: it is empty, too long, or holds any other character (``,``,
            ``:``, ``{``, ``}``, whitespace, control or zero-width characters).
    """
    return check_queue_name(name)


@dataclass(frozen=True)
class QueueKeys:
    """The Redis keys of one queue, e.g. ``fastq:{mailer}:ready``."""

    namespace: str
    queue: str

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)

    def key(self, suffix: str) -> str:
        return f"{self.namespace}:{{{self.queue}}}:{suffix}"

    @property
    def ready(self) -> str:
        return self.key("ready")

    @property
    def prio(self) -> str:
        return self.key("prio")

    @property
    def jobs(self) -> str:
        return self.key("jobs")

    @property
    def leases(self) -> str:
        """Worker id -> the deadline of every lease that worker holds."""
        return self.key("leases")

    @property
    def stalls(self) -> str:
        return self.key("stalls")

    @property
    def scheduled(self) -> str:
        return self.key("scheduled")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def broken(self) -> str:
        return self.key("broken")

    @property
    def stats(self) -> str:
        return self.key("stats")

    @property
    def wake(self) -> str:
        return self.key("wake")

    def held(self, worker_id: str) -> str:
        """The set of ids that one worker holds leases on (plus a sentinel)."""
        return self.key(f"held:{worker_id}")

    # KEYS lists, in the order each script's header documents.

    def enqueue_keys(self) -> list[str]:
        return [self.jobs, self.ready, self.prio, self.scheduled, self.stats, self.wake]

    def claim_keys(self, worker_id: str) -> list[str]:
        return [
            self.ready,
            self.prio,
            self.jobs,
            self.leases,
            self.scheduled,
            self.held(worker_id),
            self.stats,
            self.wake,
        ]

    def ack_keys(self, worker_id: str) -> list[str]:
        return [
            self.jobs,
            self.stalls,
            self.held(worker_id),
            self.scheduled,
            self.dead,
            self.broken,
            self.stats,
        ]

    def release_keys(self, worker_id: str) -> list[str]:
        return [
            self.ready,
            self.leases,
            self.held(worker_id),
            self.stats,
            self.wake,
            self.jobs,
            self.dead,
            self.stalls,
        ]

    def extend_keys(self, worker_id: str) -> list[str]:
        return [self.leases, self.held(worker_id)]

    def reap_keys(self) -> list[str]:
        return [
            self.ready,
            self.leases,
            self.jobs,
            self.dead,
            self.stats,
            self.wake,
            self.scheduled,
            self.prio,
        ]
