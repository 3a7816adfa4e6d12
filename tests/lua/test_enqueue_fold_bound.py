"""An enqueue checks that each new id has no record (an id stays ended while its
record lasts, lib/records.lua), and folds the done records the acks logged first.
After a drain, thousands of logged records wait for the reaper, which folds them a
budget at a time (FOLD_PER_REAP, 4,000 a call) so that Redis is never blocked long;
the first enqueue after the drain must not fold them all in one call either.

Found by bench/batch_drain.py: a batch's ``on_complete`` ran 0.55–0.7 s after the
batch ended, every round; its enqueue (with the id ``<batch>.complete``) was
folding the 200,000 records its blast's acks had logged, one ``EVALSHA`` of 320 ms
in SLOWLOG on a loaded 2-core box, every client of that Redis waiting meanwhile.
"""

from __future__ import annotations

import pytest
import redis
from test_scripts import ack, claim, enqueue

from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes

PER_ACK = 100  # jobs an ack settles: one logged batch of done records each


@pytest.mark.xfail(
    strict=True,
    reason="enqueue.lua folds every logged record in one call: ended_ids -> "
    "look_records -> fold_records(gen, nil), no budget (lib/records.lua)",
)
def test_the_first_enqueue_after_a_drain_folds_a_budget_of_logged_records_at_most(
    r: redis.Redis, namespace: str
) -> None:
    k = QueueKeys(namespace, "q")
    n = 20_000
    for lo in range(0, n, 1000):
        enqueue(r, k, [f"j{i}" for i in range(lo, lo + 1000)])
    while ids := claim(r, k, "w", PER_ACK).ids:
        ack(r, k, "w", Outcomes(done=ids))
    assert r.hget(k.records, "fastq:s") == str(n // PER_ACK).encode()  # 200 logged
    r.config_resetstat()
    assert enqueue(r, k, ["new"]) == 1
    calls = {name: stats["calls"] for name, stats in r.info("commandstats").items()}
    # a fold reads each logged batch with one HGET: a budget of 4,000 records is 40
    # of them, and the enqueue's own few commands come beside (none an HGET)
    assert calls.get("cmdstat_hget", 0) <= 4000 // PER_ACK, calls
