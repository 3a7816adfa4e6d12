"""Chains through workers SIGKILLed between a link's success and its ack, and
between its ack and the forward of the next link (a fault-injection hook): every
link of every chain runs, each is enqueued once, and no chain stalls."""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import pytest
import redis

import fastq
from tests.apps import pool_jobs
from tests.support.pool import Pool, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(150)]

# Kills are drawn at random (one write in ten), so their number follows the writes the
# drain makes: 200 chains drained in 0.5 s once, with one kill (and 1 to 7 in other
# runs); 400 made 6 to 26 kills in twelve runs, in 6 to 23 s (more kills, more
# hand-backs to wait for)
N_CHAINS = 400
DEADLINE_S = 60


def test_chains_of_three_survive_children_killed_at_their_acks(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children SIGKILL themselves at random round trips, just before the write that
    carries their finished jobs' acks (the master acks those by id: the chain moves
    on in Redis, the reaper forwards it) or just after it (the ack went through,
    the forward did not: the reaper again). Half the chains pass each link's return
    value to the next (those links keep a value: not noted finished, so a kill
    before their ack runs them again); half pass nothing (noted finished: each runs
    once, whatever is killed)."""
    app.registry.update(pool_jobs.app.registry)  # the pool's jobs, to make steps of
    hop, plain = app.registry["hop"], app.registry["hop_plain"]
    ids = []
    for c in range(N_CHAINS):
        name = f"c{c}"
        if c % 2:
            steps = [plain.step(name, s) for s in (1, 2, 3)]
            ids.append(app.chain(*steps, id=name))
        else:
            first = hop.step(None, name, 1)
            ids.append(
                app.chain(first, hop.step(name, 2), hop.step(name, 3), pass_results=True, id=name)
            )
    monkeypatch.setenv("FASTQ_TEST_KILL_AT_WRITE", "0.1")
    started = time.monotonic()
    pool = pools("-c", "2", "--batch", "20")
    n_links = 3 * N_CHAINS
    wait_until(lambda: app.stats("q")["processed"] == n_links, DEADLINE_S, "every link done")
    k = app.keys("q")
    wait_until(lambda: r.exists(k.chain_out, k.chained) == 0, 10, "no link left to forward")
    took_s = time.monotonic() - started
    kills = pool.log().count("fault injection: killed")
    pool.kill()

    runs = Counter({f.decode(): int(v) for f, v in r.hgetall(f"{app.namespace}:link_runs").items()})
    links = {f"c{c}#{s}" for c in range(N_CHAINS) for s in (1, 2, 3)}
    assert set(runs) == links, f"links never run: {sorted(links - set(runs))[:5]}"
    # each link enqueued once: one id each, counted once by the queue
    stats = app.stats("q")
    assert (stats["enqueued"], stats["processed"], stats["ready"]) == (n_links, n_links, 0)
    # a link with no value to keep never runs twice; one that keeps it only after a
    # kill of its own worker before its ack (at most a batch a kill)
    assert [n for n, times in runs.items() if times > 1 and int(n[1:].split("#")[0]) % 2] == []
    again = sum(times - 1 for times in runs.values())
    assert again <= kills * 20, (again, kills)
    for chain_id in ids:
        status = app.chain_status(chain_id)
        assert status is not None and status.state == "done", status
    for c in range(0, N_CHAINS, 2):
        assert app.result(f"c{c}.3") == [1, 2, 3]
    assert kills >= 2, f"{kills} kills in {took_s:.1f} s"
