"""Sharded queues (``@app.job(queue=..., shards=K)``) on one Redis: producers spread
jobs over the shards, a worker drains every shard without starving any and
without a round trip per empty shard, and the operator's view is the one queue."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis

import fastq
from fastq.protocol.keys import shard_names
from fastq.protocol.shards import shard_of
from fastq.worker import queues as layout_module
from fastq.worker import worker as worker_module
from fastq.worker.roundtrip import RoundTrip
from fastq.worker.sizer import BatchSizer
from fastq.worker.worker import Worker
from tests.support.workers import drain

SHARDS = 4


def key_for_shard(shard: int, shards: int = SHARDS) -> str:
    """A ``shard_key`` that routes to ``shard``."""
    return next(f"k{i}" for i in range(1000) if shard_of(f"k{i}", shards) == shard)


def shard_depths(app: fastq.App, queue: str, shards: int = SHARDS) -> list[int]:
    """Jobs waiting in each shard, read straight from Redis."""
    return [app.redis.llen(app.keys(name).ready) for name in shard_names(queue, shards)]


def processed_by_shard(app: fastq.App, queue: str, shards: int = SHARDS) -> list[int]:
    return [
        int(app.redis.hget(app.keys(name).stats, "processed") or 0)
        for name in shard_names(queue, shards)
    ]


class CountingClaims:
    """Counts the claims a worker's round trips carry, per queue in Redis."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.claims: Counter[str] = Counter()
        original = RoundTrip.request

        def request(rt: RoundTrip, outcomes: Any, claims: Any = (), n: int = 0, **kw: Any) -> Any:
            self.claims.update(claims)
            return original(rt, outcomes, claims, n, **kw)

        monkeypatch.setattr(RoundTrip, "request", request)


def test_a_blast_spreads_over_the_shards_and_drains_with_exact_counts(app: fastq.App) -> None:
    runs: Counter[int] = Counter()

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        runs[i] += 1

    ids = send.enqueue_many([(i,) for i in range(8000)])
    assert len(set(ids)) == 8000
    # a quarter each, in chunks of 1,000 (one script call each)
    assert shard_depths(app, "mailer") == [2000] * SHARDS
    send.enqueue_many([(i,) for i in range(8000, 8006)])  # 6 jobs: 2, 2, 1, 1 in turn
    assert sorted(shard_depths(app, "mailer")) == [2001, 2001, 2002, 2002]
    send.enqueue_many([(i,) for i in range(8006, 8012)])  # the extra two on the others
    assert shard_depths(app, "mailer") == [2003] * SHARDS
    stats = app.stats("mailer")
    assert stats["ready"] == stats["enqueued"] == 8012 and stats["shards"] == SHARDS
    drain(app, ["mailer"], batch_size=100)
    assert runs == Counter(range(8012))  # each job once
    assert processed_by_shard(app, "mailer") == [2003] * SHARDS
    stats = app.stats("mailer")
    assert stats["processed"] == 8012
    assert stats["ready"] == stats["inflight"] == stats["scheduled"] == 0


def test_work_in_one_shard_only_costs_no_claim_of_the_empty_ones(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first round trip's peek finds the one shard with work, whatever shard
    the worker starts on; the empty shards are never claimed again."""
    ran: list[int] = []

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        ran.append(i)

    last = shard_names("mailer", SHARDS)[-1]
    send.enqueue_many([(i,) for i in range(600)], shard_key=key_for_shard(SHARDS - 1))
    assert shard_depths(app, "mailer") == [0, 0, 0, 600]
    counting = CountingClaims(monkeypatch)
    drain(app, ["mailer"], batch_size=20)
    assert ran == list(range(600))  # FIFO within a shard
    claims = counting.claims
    assert claims[last] >= 600 // 200  # batches grow to 200 at most (10 x --batch)
    empty = sum(n for name, n in claims.items() if name != last)
    assert empty <= 1, claims  # only the first claim, if it started on an empty shard


def test_shards_with_work_are_served_in_turn(app: fastq.App) -> None:
    """While every shard has work, a worker's batches come from each in turn: no
    shard waits for more than one batch of each of the others."""
    order: list[int] = []

    @app.job(queue="mailer", shards=SHARDS)
    def send(shard: int) -> None:
        order.append(shard)

    for shard in range(SHARDS):
        send.enqueue_many([(shard,)] * 400, shard_key=key_for_shard(shard))
    worker = Worker(app, ["mailer"], batch_size=10, burst=True, handle_signals=False)
    sizes: list[int] = []

    class Logged(BatchSizer):
        def ran(self, batch_s: float, jobs: int, rtt_s: float = 0.0) -> None:
            sizes.append(jobs)
            super().ran(batch_s, jobs, rtt_s)

    worker.sizers.by_queue["mailer"] = Logged(10, 0.1)
    worker.run()
    assert Counter(order) == {shard: 400 for shard in range(SHARDS)}
    batches, at = [], 0
    for size in sizes:
        batch = order[at : at + size]
        assert len(set(batch)) == 1, batch  # a batch is of one shard
        batches.append(batch[0])
        at += size
    first_dry = min(max(i for i, s in enumerate(batches) if s == shard) for shard in range(SHARDS))
    served = batches[: first_dry + 1]  # while every shard still had work
    for i in range(len(served) - SHARDS + 1):
        assert len(set(served[i : i + SHARDS])) == SHARDS, served  # each in turn


def test_an_idle_worker_wakes_for_a_job_due_in_another_shard(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim reports its own shard's next due time only; the worker reads the
    others' before it sleeps, so a burst worker waits for a job due soon in any
    shard (it starts on shard 0 here; the job is in shard 3)."""

    class FirstShard(random.Random):
        def randrange(self, *args: Any, **kwargs: Any) -> int:
            return 0

    class StartsOnShard0(layout_module.QueueLayout):
        def __init__(self, queues: Any, counts: Any) -> None:
            super().__init__(queues, counts, FirstShard())

    monkeypatch.setattr(worker_module, "QueueLayout", StartsOnShard0)
    ran: list[float] = []

    @app.job(queue="mailer", shards=SHARDS)
    def send() -> None:
        ran.append(time.time())

    send.enqueue_with(delay_s=0.5, shard_key=key_for_shard(3))()
    due = time.time() + 0.5
    drain(app, ["mailer"], burst_horizon_s=2.0)
    assert len(ran) == 1 and ran[0] >= due - 0.01
    assert ran[0] - due < 0.3  # woken for it, not after an idle timeout


def test_stats_pause_and_resume_see_the_one_queue(app: fastq.App) -> None:
    ran: list[int] = []

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        ran.append(i)

    send.enqueue_many([(i,) for i in range(40)])
    app.pause("mailer")
    assert app.stats("mailer")["paused"] == 1
    for name in shard_names("mailer", SHARDS):
        assert app.redis.hget(app.keys(name).settings, "paused") == b"1"
    drain(app, ["mailer"])  # a burst worker stops rather than wait for a resume
    assert ran == []
    app.resume("mailer")
    assert app.stats("mailer")["paused"] == 0
    drain(app, ["mailer"])
    assert sorted(ran) == list(range(40))
    assert app.queues() == ["mailer"]  # the shards are not queues of their own
    assert app.shards("mailer") == SHARDS


def test_get_job_cancel_and_tags_look_in_every_shard(app: fastq.App) -> None:
    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        pass

    ids = send.enqueue_many([(i,) for i in range(40)], tags=["blast"])
    assert shard_depths(app, "mailer") == [10] * SHARDS  # spread evenly
    more = [send.enqueue_with(tags=["blast"])(i) for i in range(8)]  # a shard each in turn
    assert shard_depths(app, "mailer") == [12] * SHARDS
    for job_id in (ids[0], *more):
        info = app.get_job(job_id)
        assert info is not None and info.queue == "mailer" and info.state == "queued"
        assert app.get_job(job_id, queue="mailer") is not None
    assert app.cancel(more[0]) and app.get_job(more[0]).state == "cancelled"
    assert not app.cancel(more[0])  # cancelled already
    page = app.jobs_by_tag("blast", count=30)
    seen = [job.id for job in page.jobs]
    while page.cursor is not None:
        page = app.jobs_by_tag("blast", cursor=page.cursor, count=30)
        seen += [job.id for job in page.jobs]
    assert sorted(seen) == sorted(ids + more[1:])
    assert all(job.queue == "mailer" for job in page.jobs)
    assert app.cancel_by_tag("blast", queue="mailer") == fastq.Cancelled(stopped=47)
    assert app.stats("mailer")["cancelled"] == 48


def test_an_id_given_goes_to_its_shard_every_time(app: fastq.App) -> None:
    """Enqueueing an id again does nothing on a sharded queue too: a job's own id
    (or its unique key) picks its shard, so the second enqueue finds the first."""

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        pass

    for _ in range(3):
        send.enqueue_with(job_id="order-42")(1)
        send.enqueue_many([(i,) for i in range(10)], job_ids=[f"order-{i}" for i in range(10)])
    assert app.stats("mailer")["ready"] == 11
    first = send.enqueue_with(unique_for_s=60, unique_key="user-7")(1)
    for _ in range(5):
        assert send.enqueue_with(unique_for_s=60, unique_key="user-7")(2) == first
    home = shard_names("mailer", SHARDS)[shard_of("user-7", SHARDS)]
    assert app.redis.hexists(app.keys(home).jobs, first)
    with pytest.raises(ValueError, match="shard_key= cannot apply to a unique job"):
        send.enqueue_with(unique_for_s=60, shard_key="a")(1)


def test_dead_jobs_purge_and_retry_across_shards(app: fastq.App) -> None:
    @app.job(queue="mailer", shards=SHARDS, retries=0)
    def fail(i: int) -> None:
        raise RuntimeError(f"no {i}")

    for i in range(8):
        fail.enqueue(i)
    drain(app, ["mailer"])
    assert app.stats("mailer")["dead"] == 8
    dead = app.dead_jobs("mailer", limit=5)
    assert len(dead) == 5 and all(info.queue == "mailer" for info in dead)
    assert [d.failed_at for d in dead] == sorted(d.failed_at or 0 for d in dead)
    assert app.retry_dead("mailer", limit=3) == 3
    assert app.stats("mailer")["ready"] == 3
    assert app.purge("mailer", dead=True) == 8
    assert app.stats("mailer")["dead"] == app.stats("mailer")["ready"] == 0


def test_a_producer_and_a_worker_that_do_not_declare_the_shards_read_them_from_redis(
    app: fastq.App, redis_server: Any, namespace: str
) -> None:
    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        pass

    app.declare_queue("mailer", shards=SHARDS)
    send.enqueue(0)  # records the count in Redis
    producer = fastq.App(redis_server.url, namespace=namespace)  # registers no jobs
    producer.enqueue_many("send", [(i,) for i in range(3000)], queue="mailer")
    assert sorted(shard_depths(app, "mailer")) == [750, 750, 750, 751]  # spread evenly
    ran: Counter[int] = Counter()
    other = fastq.App(redis_server.url, namespace=namespace)

    @other.job(name="send")  # on "default": it does not know "mailer" is sharded
    def send_too(i: int) -> None:
        ran[i] += 1

    drain(other, ["mailer"])
    assert sum(ran.values()) == 3001 and app.stats("mailer")["ready"] == 0


def test_bad_shard_inputs_are_refused(app: fastq.App, redis_server: Any, namespace: str) -> None:
    def noop() -> None:
        pass

    for bad, error in (
        (0, ValueError),
        (65, ValueError),
        (-1, ValueError),
        ("4", TypeError),
        (True, TypeError),
        (2.0, TypeError),
    ):
        with pytest.raises(error, match="shards"):
            app.job(queue="q", shards=bad)(noop)
    assert app.registry == {}
    with pytest.raises(ValueError, match="'#' is reserved for the shards"):
        app.job(queue="mailer#1")(noop)
    with pytest.raises(ValueError, match="'#' is reserved"):
        app.enqueue("noop", queue="mailer#1")
    with pytest.raises(ValueError, match="'#' is reserved"):
        app.stats("mailer#1")
    with pytest.raises(ValueError, match="'#' is reserved"):
        Worker(app, ["mailer#1"])
    app.job(queue="mailer", shards=4)(noop)
    with pytest.raises(ValueError, match="declared with shards=4 already"):
        app.job(queue="mailer", shards=8, name="other")(noop)
    app.job(queue="mailer", name="plain")(noop)  # the queue's count, said once
    app.enqueue("noop")
    other = fastq.App(redis_server.url, namespace=namespace)
    mismatch = "has 4 shards in Redis .* declares shards=8"
    with pytest.raises(fastq.ShardCountMismatch, match=mismatch):
        other.declare_queue("mailer", shards=8)  # checked against Redis at once
    with pytest.raises(fastq.ShardCountMismatch, match=mismatch):
        other.enqueue("noop", queue="mailer")
    with pytest.raises(fastq.ShardCountMismatch):
        other.enqueue_many("noop", [()], queue="mailer")
    with pytest.raises(fastq.ShardCountMismatch):
        Worker(other, ["mailer"], burst=True, handle_signals=False).run()
    assert app.stats("mailer")["enqueued"] == 1  # nothing written by the refused calls


def test_sharding_a_queue_keeps_the_jobs_it_holds(redis_server: Any, namespace: str) -> None:
    """Shard 0 is the queue itself: jobs queued before it was sharded are served."""
    before = fastq.App(redis_server.url, namespace=namespace)
    before.declare_queue("mailer")
    before.enqueue_many("send", [(i,) for i in range(50)], queue="mailer")
    after = fastq.App(redis_server.url, namespace=namespace)
    ran: list[int] = []

    @after.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        ran.append(i)

    send.enqueue_many([(i,) for i in range(50, 100)])
    drain(after, ["mailer"])
    assert sorted(ran) == list(range(100))


def test_per_key_rate_limit_holds_across_shards(app: fastq.App) -> None:
    """A per-key limit keeps one state per key (in that key's shard), whatever shard
    its jobs are in: a constant key limits the whole sharded queue."""
    starts: list[float] = []

    @app.job(queue="mailer", shards=SHARDS, rate_key="all", rate=20, per_s=1.0, burst=1)
    def send(i: int) -> None:
        starts.append(time.monotonic())

    send.enqueue_many([(i,) for i in range(12)])
    for i in range(12, 20):
        send.enqueue(i)  # a shard each in turn
    assert sum(1 for d in shard_depths(app, "mailer") if d) == SHARDS
    t0 = time.monotonic()
    drain(app, ["mailer"], burst_horizon_s=2.0)
    assert len(starts) == 20
    assert time.monotonic() - t0 >= 19 / 20 - 0.05  # 20/s, evenly: not 4 x 20/s


def test_a_pool_of_workers_drains_a_sharded_queue(app: fastq.App) -> None:
    """Several workers at once (threads here): every job once, every shard served."""
    lock = threading.Lock()
    runs: Counter[int] = Counter()

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        with lock:
            runs[i] += 1

    send.enqueue_many([(i,) for i in range(8000)])
    workers = [
        Worker(app, ["mailer"], burst=True, handle_signals=False, batch_size=50) for _ in range(3)
    ]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert runs == Counter(range(8000))
    assert processed_by_shard(app, "mailer") == [2000] * SHARDS


def test_shard_names_stay_inside_their_hash_tag(r: redis.Redis) -> None:
    """Each shard is a slot of its own: the name is the whole hash tag."""
    from fastq.protocol.keys import QueueKeys

    names = shard_names("mailer", 8)
    assert names == ["mailer", *(f"mailer#{i}" for i in range(1, 8))]
    assert QueueKeys("fastq", "mailer#7").ready == "fastq:{mailer#7}:ready"
    for bad in ("mailer#0", "mailer#64", "mailer#01", "mailer#x", "#1"):
        with pytest.raises(ValueError):
            QueueKeys("fastq", bad)


def test_jobs_hooks_and_progress_see_the_queue_not_the_shard(app: fastq.App) -> None:
    """``current_job().queue`` and a hook's ``event.queue`` name the queue; a job's
    progress is kept in its own shard, where ``get_job`` finds it."""
    seen: list[tuple[str, str]] = []
    progress: list[Any] = []

    @app.before_job
    def hook(event: Any) -> None:
        seen.append(("hook", event.queue))

    @app.job(queue="mailer", shards=SHARDS)
    def send() -> None:
        job = fastq.current_job()
        seen.append(("job", job.queue))
        job.set_progress(0.5, {"at": job.id})
        assert worker._leases is not None
        worker._leases.send_progress()  # now, not at the lease thread's next beat
        info = app.get_job(job.id)
        progress.append((info.progress, info.progress_meta) if info else None)

    ids = [send.enqueue_with(shard_key=key_for_shard(s))() for s in range(SHARDS)]
    worker = Worker(app, ["mailer"], burst=True, handle_signals=False)
    worker.run()
    assert set(seen) == {("hook", "mailer"), ("job", "mailer")} and len(seen) == 2 * SHARDS
    assert sorted(progress, key=str) == sorted(((0.5, {"at": i}) for i in ids), key=str)


def test_a_pools_metrics_count_a_shards_jobs_under_its_queue(app: fastq.App) -> None:
    from fastq.shm.metrics import PROCESSED, MetricsBoard

    @app.job(queue="mailer", shards=SHARDS)
    def send() -> None:
        pass

    board = MetricsBoard(1, ["default", "mailer"], app.registry)
    child = board.child(0)
    child.count("mailer#3", "send", PROCESSED, 2)
    child.count("mailer", "send", PROCESSED)
    cells = {(q, job): cell for q, job, cell in board.cells(board.totals())}
    assert cells[("mailer", "send")][PROCESSED] == 3
    assert ("default", "send") not in cells


def test_a_periodic_job_on_a_sharded_queue_fires_into_shard_0_and_runs(
    app: fastq.App, r: redis.Redis
) -> None:
    """A schedule's runs and its last-fired slot live in shard 0 (the queue's own
    name), whatever count a reaper knows, so every reaper fires each slot once."""
    from fastq.reaper.firer import Firer

    ran: list[str] = []

    @app.periodic(every_s=1, queue="mailer", shards=SHARDS)
    def tick() -> None:
        ran.append(fastq.current_job().id)

    k = app.keys("mailer")
    r.hset(k.periodic, "tick", int(time.time() * 1000) // 1000 * 1000 - 5000)  # a missed slot
    Firer(app).fire_due(r)
    assert shard_depths(app, "mailer") == [1, 0, 0, 0]
    drain(app, ["mailer"])
    assert len(ran) == 1 and ran[0].startswith("periodic:tick:")


def test_results_async_jobs_and_at_most_once_jobs_on_a_sharded_queue(app: fastq.App) -> None:
    ran: list[int] = []

    @app.job(queue="mailer", shards=SHARDS, result_ttl_s=60)
    def double(i: int) -> int:
        return 2 * i

    @app.job(queue="mailer", delivery="at_most_once")
    def once(i: int) -> None:
        ran.append(i)

    @app.job(queue="mailer")
    async def waits(i: int) -> None:
        ran.append(-i)

    ids = [double.enqueue(i) for i in range(8)]  # a shard each in turn
    once.enqueue_many([(i,) for i in range(2000)])  # chunks a shard each
    waits.enqueue_many([(i,) for i in range(1, 1001)])
    assert all(shard_depths(app, "mailer"))
    drain(app, ["mailer"], async_jobs=8)
    assert [app.result(job_id, timeout_s=0) for job_id in ids] == [2 * i for i in range(8)]
    assert sorted(ran) == list(range(-1000, 0)) + list(range(2000))
    stats = app.stats("mailer")
    assert (stats["ready"], stats["inflight"], stats["processed"]) == (0, 0, 3008)


def test_a_sharded_queue_keeps_its_place_in_the_q_order(app: fastq.App) -> None:
    """Strict priority across ``-q high,mailer,low`` with ``mailer`` sharded: every
    job of an earlier queue runs first, also when it arrives while ``mailer``
    drains (the peek at ``high`` comes before the peeks at ``mailer``'s shards)."""
    order: list[str] = []

    @app.job(queue="high")
    def urgent(i: int) -> None:
        order.append("high")

    @app.job(queue="mailer", shards=SHARDS)
    def send(i: int) -> None:
        order.append("mailer")
        if order.count("mailer") == 2000:  # midway, in whatever shard runs then
            urgent.enqueue_many([(j,) for j in range(300)])

    @app.job(queue="low")
    def later(i: int) -> None:
        order.append("low")

    later.enqueue_many([(i,) for i in range(500)])
    send.enqueue_many([(i,) for i in range(4000)])
    urgent.enqueue_many([(i,) for i in range(500)])
    drain(app, ["high", "mailer", "low"], batch_size=20)
    assert Counter(order) == {"high": 800, "mailer": 4000, "low": 500}
    assert order[:500] == ["high"] * 500
    assert order[-500:] == ["low"] * 500
    first_mailer = order.index("mailer")
    arrived = [i for i, q in enumerate(order) if q == "mailer"][1999]  # the job that enqueued
    late = order.index("high", first_mailer)
    # after the batch in hand and at most two claimed (each at most 10 x --batch)
    assert late > arrived and order[arrived:late].count("mailer") <= 3 * 200
    # the round whose peek found it claimed both: the mailer batch it took runs too
    done = len(order) - order[::-1].index("high")
    assert order[late:done].count("mailer") <= 200 and order[late:done].count("high") == 300


def test_sharding_a_queue_with_a_rate_limit_spreads_the_limit_over_its_shards(
    redis_server: Any, namespace: str
) -> None:
    """The limit was shard 0's alone: the process that records the count sets it on
    every shard, as the whole queue's, so the new shards are not left unlimited."""
    before = fastq.App(redis_server.url, namespace=namespace)
    before.declare_queue("mailer")
    before.enqueue("send", queue="mailer")
    before.set_rate_limit("mailer", 20, per_s=1, burst=8)
    after = fastq.App(redis_server.url, namespace=namespace)
    after.declare_queue("mailer", shards=SHARDS)
    after.enqueue("send", queue="mailer")  # records the count
    for name in shard_names("mailer", SHARDS):
        settings = after.redis.hgetall(after.keys(name).settings)
        assert settings == {
            b"rate": b"20",
            b"rate_period_ms": b"1000",
            b"rate_burst": b"8",
            b"rate_shards": b"4",
        }, name
    assert str(after.rate_limit("mailer")) == "20/s (burst 8)"
    after.set_rate_limit("mailer", None)
    assert all(
        not after.redis.exists(after.keys(name).settings) for name in shard_names("mailer", SHARDS)
    )
