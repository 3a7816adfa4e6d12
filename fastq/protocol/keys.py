"""Redis key names: every key fastq writes is named here, and only here
(``tests/unit/test_layers.py`` fails on a key name built anywhere else).

Every key of queue ``q`` carries the hash tag ``{q}`` so that each Lua script
touches a single Redis Cluster slot. Scripts never build key names: they get
every key they touch through KEYS, in the order ``fastq.protocol.contracts`` declares.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastq.validate import SHARD_SEP, check_physical_queue_name, check_queue_name


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a usable queue name: 1 to 100 ASCII letters, digits,
    ``_``, ``.`` or ``-`` (the limits live in :mod:`fastq.validate`).

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: it is empty, too long, or holds any other character (``,``,
            ``:``, ``{``, ``}``, ``#``: the shards' names, whitespace, control or
            zero-width characters).
    """
    return check_queue_name(name)


def shard_names(queue: str, shards: int) -> list[str]:
    """The queues in Redis of a logical queue of ``shards`` shards: ``queue`` itself
    (shard 0), then ``queue#1`` ... ``queue#<shards-1>``. Shard 0 keeps the plain
    name so that sharding a queue keeps the jobs it holds, and a producer or a
    reaper that does not know the count still writes to a shard workers serve."""
    return [queue] + [f"{queue}{SHARD_SEP}{i}" for i in range(1, shards)]


def logical_queue(name: str) -> str:
    """The queue a shard belongs to: ``mailer`` for ``mailer#3`` (and for ``mailer``)."""
    return name.partition(SHARD_SEP)[0]


def queue_of_key(key: str) -> str:
    """The queue a key belongs to: its hash tag, ``mailer`` in ``fastq:{mailer}:ready``."""
    return key[key.index("{") + 1 : key.index("}")]


# a member of a queue's group_ready: "<group>\n", 18 characters of its order, its id
# (lua/lib/groups.lua)
_GROUP_ORDER_LEN = 18


def grouped_id(member: bytes) -> bytes:
    """The job id in a member of a queue's ``group_ready``."""
    return member[member.index(b"\n") + 1 + _GROUP_ORDER_LEN :]


@dataclass(frozen=True)
class NamespaceKeys:
    """The keys of a namespace that belong to no queue, e.g. ``fastq:queues``."""

    namespace: str

    @property
    def queues(self) -> str:
        """A set: every queue the namespace knows (a sharded queue by its shard 0)."""
        return f"{self.namespace}:queues"

    @property
    def shards(self) -> str:
        """A hash: queue -> the shard count of each sharded queue."""
        return f"{self.namespace}:shards"

    @property
    def workers(self) -> str:
        """A hash: the worker registry (``fastq.protocol.workers``)."""
        return f"{self.namespace}:workers"

    @property
    def key_rates(self) -> str:
        """A hash: formatted ``rate_key`` -> the limit that overrides its jobs' own
        (``app.set_key_rate_limit``), as ``"rate period_ms burst"``."""
        return f"{self.namespace}:key_rates"

    def circuit(self, key: str) -> str:
        """A hash: the circuit breaker of one formatted ``circuit_key`` (its failures
        in a row, and while open, until when)."""
        return f"{self.namespace}:circuit:{key}"

    @property
    def circuits(self) -> str:
        """A set: the formatted keys of the circuit breakers open or half-open (a
        worker adds one as it opens it, and takes it out as it closes it), so that a
        listing reads them, not the keyspace."""
        return f"{self.namespace}:circuits"

    @property
    def session_epoch(self) -> str:
        """A counter: the dashboard's session epoch (``fastq serve
        --revoke-sessions`` adds one, and every session made before it ends)."""
        return f"{self.namespace}:dashboard:epoch"

    def revoked_session(self, nonce: str) -> str:
        """A flag: the dashboard session ``nonce`` was logged out (until it would
        have expired anyway)."""
        return f"{self.namespace}:dashboard:revoked:{nonce}"

    @property
    def every(self) -> str:
        """A ``SCAN`` pattern that matches every key of the namespace."""
        return f"{self.namespace}:*"


@dataclass(frozen=True)
class QueueKeys:
    """The Redis keys of one queue, e.g. ``fastq:{mailer}:ready``."""

    namespace: str
    queue: str

    def __post_init__(self) -> None:
        check_physical_queue_name(self.queue)  # a user's name, or a shard's

    def key(self, suffix: str) -> str:
        return f"{self.namespace}:{{{self.queue}}}:{suffix}"

    @property
    def ready(self) -> str:
        return self.key("ready")

    @property
    def prio(self) -> str:
        return self.key("prio")

    @property
    def group_ready(self) -> str:
        """A zset: the ready jobs of the queue's groups, scored 0 and ordered by
        ``<group>\n<priority and place><id>`` (``lua/lib/groups.lua``)."""
        return self.key("group_ready")

    @property
    def group_ring(self) -> str:
        """A list: the groups with ready jobs, in the order the claim serves them
        (``""``: the jobs of no group)."""
        return self.key("group_ring")

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
    def sched_prio(self) -> str:
        """Scheduled id -> where it goes when due: its priority (delayed jobs whose
        priority is not 0), or ``r`` (a retry: back to the front). Promotion reads
        this, never an envelope or a score; jobs of neither kind have no entry."""
        return self.key("sched_prio")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def poison(self) -> str:
        """Dead id -> why it died when no worker could say (it stalled too often)."""
        return self.key("poison")

    @property
    def broken(self) -> str:
        return self.key("broken")

    @property
    def stats(self) -> str:
        return self.key("stats")

    @property
    def settings(self) -> str:
        """The queue's settings (``paused``: ``1`` while paused; ``rate``,
        ``rate_period_ms``, ``rate_burst``, ``rate_tat_us``: a rate limit; ``ustart``: ``1`` once
        it had a ``unique_until="start"`` job). Absent for a queue with none, so that
        a claim on it pays one HMGET of a missing key."""
        return self.key("settings")

    @property
    def cancelled(self) -> str:
        """Cancelled id -> when it was cancelled (ms): the marker that keeps a cancelled
        job from running or coming back: a claim that pops an id without an envelope
        drops it if it is here, else quarantines it as broken. Trimmed by age (the
        dead jobs' max age)."""
        return self.key("cancelled")

    @property
    def tagged(self) -> str:
        """``<tag>\\n<id>`` of every live tagged job, all scored 0: a lexical range
        lists one tag's jobs (one key per queue, never one per tag)."""
        return self.key("tagged")

    @property
    def links(self) -> str:
        """Id -> its tags and unique lock, for the jobs that have either: what the
        end of a job cleans up (format in ``lua/lib/unique.lua``)."""
        return self.key("links")

    @property
    def unique(self) -> str:
        """Unique key -> the id of the job holding its lock."""
        return self.key("unique")

    @property
    def unique_exp(self) -> str:
        """Unique key -> when its lock's window ends (ms, Redis' clock)."""
        return self.key("unique_exp")

    @property
    def marker(self) -> str:
        """Written once (``SET NX``: when, and a random token) and never deleted: its
        absence, or another token, says Redis lost this queue's data
        (:mod:`fastq.protocol.markers`)."""
        return self.key("marker")

    @property
    def records(self) -> str:
        """Id -> the record of a job that ended (done, dead, cancelled): how and when,
        kept a while; the current generation (format in ``lua/lib/records.lua``)."""
        return self.key("records")

    @property
    def records_old(self) -> str:
        """The previous generation of records, dropped whole when the current one
        is retired (full or old) or, on a quiet queue, by the reaper once it is old."""
        return self.key("records_old")

    @property
    def history(self) -> str:
        """Jobs done and failed by 10-second slot, a ring of two hours, written by
        the acks (``lua/lib/history.lua``), read by the dashboard
        (:mod:`fastq.protocol.history`)."""
        return self.key("history")

    @property
    def stale(self) -> str:
        """``<worker>\n<id>`` of each stale outcome counted -> when (ms): a resent
        late ack counts its jobs once. Kept an hour."""
        return self.key("stale")

    @property
    def wake(self) -> str:
        return self.key("wake")

    @property
    def batched(self) -> str:
        """Job id -> the id of its batch, while the job lives (``lua/lib/batches.lua``)."""
        return self.key("batched")

    @property
    def batches(self) -> str:
        """Batch id -> this queue's share of it: its jobs enqueued, done, dead,
        cancelled, failed, and whether the batch is sealed (``lua/lib/batches.lua``)."""
        return self.key("batches")

    @property
    def batches_due(self) -> str:
        """Batch ids whose sealed share here has ended: what a settler tells the
        batch (the worker that ended it at once, else the reaper)."""
        return self.key("batches_due")

    @property
    def chained(self) -> str:
        """Job id -> the rest of its chain, while the job (a link) lives
        (``lua/lib/chains.lua``)."""
        return self.key("chained")

    @property
    def chain_out(self) -> str:
        """Id of a link that ended done -> the rest of its chain: what a forwarder
        enqueues next (the worker that acked it at once, else the reaper)."""
        return self.key("chain_out")

    @property
    def periodic(self) -> str:
        """Periodic job name -> the last slot (Unix ms) fired for it, by any reaper."""
        return self.key("periodic")

    @property
    def periodic_run(self) -> str:
        """Periodic job name -> the id of its last run (to skip a slot while it lives)."""
        return self.key("periodic_run")

    @property
    def progress(self) -> str:
        """Running job id -> its latest progress report (JSON), deleted when it ends."""
        return self.key("progress")

    def result(self, job_id: str) -> str:
        """A kept return value (JSON), with the job's ``result_ttl_s``."""
        return self.key(f"result:{job_id}")

    def result_ready(self, job_id: str) -> str:
        """A list holding one token once the result is kept: what ``app.result()``
        blocks on. Same TTL."""
        return self.key(f"result_ready:{job_id}")

    def rate_state(self, rate_key: str) -> str:
        """The GCRA state of one per-key rate limit (a job's formatted ``rate_key``);
        it expires when the key's bucket is full again."""
        return self.key(f"rate:{rate_key}")

    def held(self, worker_id: str) -> str:
        """The set of ids that one worker holds leases on (plus a sentinel)."""
        return self.key(f"held:{worker_id}")

    def taken_seq(self, worker_id: str) -> str:
        """The highest number of one worker's at-most-once successes counted (so
        that a resent request counts none twice); it lives an hour."""
        return self.key(f"taken_seq:{worker_id}")

    def epoch(self, worker_id: str) -> str:
        """One worker's epoch (an integer), once it gave up on a request: its calls
        carrying an older one are refused (``lua/lib/epoch.lua``). Expires a day
        after it was last raised."""
        return self.key(f"epoch:{worker_id}")


@dataclass(frozen=True)
class BatchKeys:
    """The Redis keys of one batch (``fastq.protocol.batches``): its own hash, in a
    slot of its own (its id is the hash tag), and the namespace's index of batches."""

    namespace: str
    batch_id: str

    @property
    def batch(self) -> str:
        """The batch: its state, callbacks and the counts of each member
        (``lua/batch_open.lua``)."""
        return f"{self.namespace}:batch:{{{self.batch_id}}}"

    @property
    def index(self) -> str:
        """Batch id -> when it was opened (ms): the namespace's batches, for listings."""
        return f"{self.namespace}:batches"

    @property
    def work(self) -> str:
        """Batch id -> when a reaper should look at it (ms): a close or an end under
        way, whose caller may die before it is told everywhere."""
        return f"{self.namespace}:batches:work"


@dataclass(frozen=True)
class ChainKeys:
    """The Redis key of one chain (``fastq.protocol.chains``): what its links are,
    for its status, in a slot of its own (its id is the hash tag)."""

    namespace: str
    chain_id: str

    @property
    def chain(self) -> str:
        """The chain: its links (queue, id, name) and, once it stopped short, why."""
        return f"{self.namespace}:chain:{{{self.chain_id}}}"
