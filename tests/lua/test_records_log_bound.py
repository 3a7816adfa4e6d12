"""Done records are logged a batch an ack and folded later (lib/records.lua). HTTP
workers acknowledge one job a call, so each done is a batch of one, and with no
reaper running nothing folded them: 8,000 HTTP dones left 20,000 logged batches,
and the enqueue that folds them first (an id it must look up) hit Lua's unpack
limit, every enqueue of the queue refused. The log is now bounded (an ack past
LOG_MAX_BATCHES folds the oldest batch) and a fold deletes in chunks."""

from __future__ import annotations

import redis
from test_scripts import claim, enqueue

from fastq.protocol import scripts
from fastq.protocol.contracts import ACK
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes

LOG_MAX_BATCHES = 2000  # lib/records.lua


def unfolded(r: redis.Redis, k: QueueKeys) -> int:
    first, end = r.hmget(k.records, "fastq:f", "fastq:s")
    return int(end or 0) - int(first or 0)


def test_acks_of_one_job_each_keep_the_log_bounded_with_no_reaper(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    n = 9000  # more logged batches than one unpack() takes
    for lo in range(0, n, 1000):
        assert enqueue(r, k, [f"j{i}" for i in range(lo, lo + 1000)]) == 1000
    keys = ACK.keys_for(k, "http")
    while ids := claim(r, k, "http", 1000).ids:
        acks = [ACK.command(keys, Outcomes(done=[i]).ack_argv(10**9, 1000, "http")) for i in ids]
        assert scripts.call_many(r, acks) == [1] * len(ids)
        assert unfolded(r, k) <= LOG_MAX_BATCHES
    assert unfolded(r, k) == LOG_MAX_BATCHES
    # an enqueue that looks its ids up folds what is logged, and goes through
    assert enqueue(r, k, [f"new{i}" for i in range(1000)]) == 1000
    assert unfolded(r, k) == 0
    # and an id that ended is still known as ended: not enqueued again
    assert enqueue(r, k, ["j0", f"j{n - 1}"]) == 0
    record = r.hget(k.records, f"j{n - 1}")
    assert record is not None and record.startswith(b"done|")
