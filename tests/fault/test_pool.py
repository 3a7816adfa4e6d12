"""``fastq pool`` under faults: real processes, a real redis-server, SIGKILL and friends.

Every test checks the contract: each job ran at least once, none was lost, and
re-runs stay within what the killed children held.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import orjson
import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import (
    Pool,
    drain_while_killing_children,
    gone,
    lose_host,
    recover_lost_host,
    runs,
    wait_until,
)
from tests.support.processes import fastq_cmd, subprocess_env

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]


def test_sigkill_random_children_while_draining(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n, batch = 4000, 50
    # 3 ms jobs on 4 children: 80% takes 2.4 s at least, whatever fastq's speed,
    # three times the 4 kills' 0.8 s (20,000 no-op jobs held only on a slow box)
    app.enqueue_many("work", [(i, 0.003) for i in range(n)], queue="q")
    pool = pools("-c", "4", "--batch", str(batch))
    # a child holds at most two batches (its slots): the one running and the one
    # prefetched; a kill re-runs the job in hand alone (in_flight=1)
    drain_while_killing_children(
        app,
        r,
        pool,
        n,
        batch,
        children=4,
        until=0.8,
        max_kills=4,
        every_s=0.2,
        min_kills=3,
        in_flight=1,
    )


def test_a_crash_reruns_only_the_job_in_hand(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    """6,000 jobs, ``pool -c 2``, a child SIGKILLed three times: none lost, and each
    kill re-ran one job, the one its child was running; the finished jobs of its
    batch, whose ack had not gone out, were acknowledged by the master."""
    n = 6000
    # 1 ms jobs on 2 children: 80% takes 2.4 s at least, four times the kills' 0.6 s
    app.enqueue_many("work", [(i, 0.001) for i in range(n)], queue="q")
    pool = pools("-c", "2", "--batch", "100", "--max-stalls", "5")
    duplicates, kills = drain_while_killing_children(
        app, r, pool, n, 100, until=0.8, max_kills=3, every_s=0.2, min_kills=3, in_flight=1
    )
    assert duplicates <= kills
    assert re.search(r"master: acknowledged \d+ jobs that \S+ finished on q", pool.log())


def test_lost_host_then_a_reaper_and_a_new_pool_finish(
    app: fastq.App,
    r: redis.Redis,
    pools: Callable[..., Pool],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    n = 400
    app.enqueue_many("work", [(i, 0.02) for i in range(n)], queue="q")
    first = pools("-c", "2", "--batch", "10", "--lease", "2")
    workers = first.wait_children(2)
    wait_until(lambda: app.stats("q")["processed"] >= 50, 30, "some progress")
    lose_host(first, workers)
    leased = app.stats("q")["inflight"]
    assert leased > 0
    recover_lost_host(app, r, redis_server.url, pools, n, leased)


def test_sigterm_mid_drain_loses_nothing_and_runs_nothing_twice(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 3000
    app.enqueue_many("work", [(i, 0.002) for i in range(n)], queue="q")
    pool = pools("-c", "4", "--batch", "20", "--graceful-timeout", "10")
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    t0 = time.monotonic()
    assert pool.stop() == 0, pool.log()
    assert time.monotonic() - t0 < 10
    ran = runs(r, app.namespace)
    stats = app.stats("q")
    assert set(ran.values()) == {1}, "a job ran twice"
    assert stats["processed"] == len(ran)
    assert stats["inflight"] == 0 and stats["ready"] == n - len(ran)
    # what was prefetched but not run went back to the front, ahead of the never-claimed
    ready_front_first = r.lrange(app.keys("q").ready, 0, -1)[::-1]
    args = [orjson.loads(r.hget(app.keys("q").jobs, job_id))[1][0] for job_id in ready_front_first]
    never_claimed = 0  # the back: ids no child ever claimed, in order, up to n - 1
    while never_claimed < len(args) and args[-1 - never_claimed] == n - 1 - never_claimed:
        never_claimed += 1
    handed_back = args[: len(args) - never_claimed]
    # the never-claimed are at the back, whole (a hand-back sent to the back would
    # end the list with an id below n - 1), and every id in front of them was
    # claimed before them. (Whether anything was prefetched at the stop cannot be
    # told apart here: the latest claims handed back in claim order continue the
    # never-claimed run.)
    assert never_claimed and args[-1] == n - 1
    assert max(handed_back, default=-1) < n - never_claimed


def test_a_job_that_kills_its_worker_goes_dead_as_poison(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i,) for i in range(300)], queue="q")
    poison = app.enqueue("suicide", [999], queue="q")
    app.enqueue_many("work", [(i,) for i in range(300, 600)], queue="q")
    pool = pools("-c", "2", "--batch", "20", "--max-stalls", "2")
    wait_until(
        lambda: app.stats("q")["processed"] == 600 and app.stats("q")["dead"] == 1, 60, "the drain"
    )
    assert pool.proc.poll() is None, "the pool went down"
    assert pool.stop() == 0
    info = app.get_job(poison, queue="q")
    assert info is not None and info.state == "dead"
    assert "stalled 3 times" in (info.last_error or "")
    assert runs(r, app.namespace)[999] == 3  # max_stalls 2: dead at the third death
    assert set(runs(r, app.namespace)) == set(range(600)) | {999}
    # a poison job needs a person: one ERROR line, naming it and why it died
    log = pool.log()
    dead_lines = [line for line in log.splitlines() if " is dead: " in line]
    assert len(dead_lines) == 1, log
    assert re.search(
        rf" ERROR fastq\.\w+: job {re.escape(poison)} of queue q is dead: stalled 3 times",
        dead_lines[0],
    ), log


def test_a_child_killed_between_finishing_jobs_and_their_ack_runs_none_twice(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children SIGKILL themselves at random round trips, just before or just after
    the write that carries their finished jobs' acks (a fault-injection hook): no
    job is lost, and no finished job runs again."""
    n = 3000
    app.enqueue_many("work", [(i,) for i in range(n)], queue="q")
    monkeypatch.setenv("FASTQ_TEST_KILL_AT_WRITE", "0.05")
    pool = pools("-c", "2", "--batch", "20")
    wait_until(lambda: app.stats("q")["processed"] == n, 120, "the drain")
    kills = pool.log().count("fault injection: killed")
    pool.kill()
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(n)), "a job was lost"
    assert [i for i, times in ran.items() if times > 1] == [], f"run twice, after {kills} kills"
    assert kills >= 2


def test_a_long_job_hands_back_the_jobs_waiting_behind_it(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    """A job blocked in a call that releases the GIL (an hour's sleep, standing in
    for a socket read with no timeout) does not keep its batch-mates: they go back
    to the queue and the other child runs them, each once, while it runs on."""
    app.enqueue_many("work", [(i,) for i in range(300)], queue="q")
    app.enqueue("work", [999, 3600], queue="q")
    app.enqueue_many("work", [(i,) for i in range(300, 600)], queue="q")
    pool = pools("-c", "2", "--batch", "100", "--graceful-timeout", "1")  # after 2 s by default
    wait_until(lambda: app.stats("q")["processed"] == 600, 60, "the mates of the long job")
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(600)) | {999} and set(ran.values()) == {1}
    stats = app.stats("q")
    assert (stats["ready"], stats["inflight"]) == (0, 1)  # the long job alone, still running
    # the child says so once its hand-back is written: the mates may be run first
    said = r"job \S+ \(work\) has run 2 s; \d+ jobs waiting behind it go back"
    wait_until(lambda: re.search(said, pool.log()) is not None, 10, "the hand-back said")
    pool.stop()  # the long job is interrupted, back to the queue
    assert (app.stats("q")["ready"], app.stats("q")["inflight"]) == (1, 0)


@pytest.mark.parametrize(
    ("job", "cause"),
    [
        ("segv", "was killed by SIGSEGV"),
        ("exits", "exited: the job raised SystemExit(3)"),
        ("suicide", "exited with status 1 (sys.exit() or os._exit() in the job?)"),
    ],
)
def test_a_job_that_crashes_its_worker_is_that_jobs_fault_alone(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], job: str, cause: str
) -> None:
    """A job that takes its child down (SIGSEGV, sys.exit(3), os._exit(1)) three
    times: its child is replaced at once each time (no crash-loop backoff), its
    batch-mates each run once, it goes dead saying how its worker died, and a job
    due on another queue starts on time: once due and the first queue empty (strict
    priority)."""
    app.enqueue_many("work", [(i,) for i in range(300)], queue="q")
    poison = app.enqueue(job, [999], queue="q")
    app.enqueue_many("work", [(i,) for i in range(300, 600)], queue="q")
    pool = pools("-c", "2", "--batch", "50", "--max-stalls", "2", "-q", "q,other")
    # due once the children work: their start on a loaded machine is not the point
    wait_until(lambda: app.stats("q")["processed"] > 0, 30, "the drain to start")
    due_at = time.time() + 1  # the test's clock is the pool's and Redis'
    app.enqueue("stamp", [1], queue="other", at=due_at)
    wait_until(
        lambda: app.stats("q")["processed"] == 600 and app.stats("q")["dead"] == 1, 60, "the drain"
    )
    drained_at = time.time()  # 'other' waits for 'q' to be empty: strict priority
    wait_until(lambda: r.hexists(f"{app.namespace}:stamps", "1"), 30, "the job due on 'other'")
    assert pool.stop() == 0
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(600)) | {999} and ran[999] == 3
    assert all(ran[i] == 1 for i in range(600)), "a batch-mate ran twice"
    info = app.get_job(poison, queue="q")
    assert info is not None and info.state == "dead" and info.stalls == 3
    assert (
        info.last_error
        == f"stalled 3 times, the last: its worker {cause} while running it (poison job?)"
    )
    log = pool.log()
    assert "crash-looping" not in log, log
    assert log.count("died running a job; replacing it") == 3, log
    late_s = float(r.hget(f"{app.namespace}:stamps", "1")) - max(due_at, drained_at)
    assert late_s < 2.0, f"the job due on another queue started {late_s:.1f} s late"


def test_a_leaking_child_is_recycled_above_max_memory(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("leak", [(i, 20) for i in range(40)], queue="q")
    pool = pools("-c", "2", "--batch", "1", "--max-memory-per-child", "150M")
    wait_until(lambda: app.stats("q")["processed"] == 40, 60, "the drain")
    assert pool.stop() == 0
    assert set(runs(r, app.namespace)) == set(range(40))
    assert r.scard(f"{app.namespace}:pids") > 2, "no child was recycled"
    assert "recycling" in pool.log()


def test_a_stopped_child_is_killed_and_replaced_and_its_jobs_return(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue_many("work", [(i, 0.01) for i in range(300)], queue="q")
    pool = pools("-c", "2", "--batch", "10", "--child-timeout", "2")
    victim = pool.wait_children(2)[0]
    wait_until(lambda: app.stats("q")["processed"] >= 20, 30, "some progress")
    victim.suspend()  # SIGSTOP
    wait_until(lambda: gone(victim), 20, "the kill")
    wait_until(lambda: app.stats("q")["processed"] == 300, 60, "the drain")
    assert pool.stop() == 0
    assert set(runs(r, app.namespace)) == set(range(300))
    assert "silent" in pool.log()


def test_a_job_longer_than_its_lease_runs_exactly_once(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    app.enqueue("work", [1, 6.0], queue="q")
    pool = pools("-c", "2", "--lease", "2")
    wait_until(lambda: app.stats("q")["processed"] == 1, 30, "the long job")
    assert pool.stop() == 0
    assert runs(r, app.namespace) == {1: 1}
    assert app.stats("q")["stalled"] == 0


def test_sighup_rolls_the_children_over_without_loss_or_duplicates(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 3000
    app.enqueue_many("work", [(i, 0.001) for i in range(n)], queue="q")
    pool = pools("-c", "2", "--batch", "20")
    before = {p.pid for p in pool.wait_children(2)}
    wait_until(lambda: app.stats("q")["processed"] >= 500, 30, "some progress")
    pool.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: app.stats("q")["processed"] == n, 60, "the drain")
    after = {p.pid for p in pool.wait_children(2)}
    assert pool.stop() == 0
    assert not before & after, "children were not replaced"
    assert set(runs(r, app.namespace).values()) == {1}
    assert len(runs(r, app.namespace)) == n


def test_redis_restarted_mid_drain(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool], redis_server: RedisServer
) -> None:
    n = 2000
    app.enqueue_many("work", [(i, 0.002) for i in range(n)], queue="q")
    pool = pools("-c", "2", "--batch", "20")
    wait_until(lambda: app.stats("q")["processed"] >= 300, 30, "some progress")
    redis_server.restart()  # kill -9, then start on the same port and data
    app.close()
    wait_until(lambda: app.stats("q")["processed"] == n, 60, "the drain after the restart")
    assert pool.proc.poll() is None
    assert pool.stop() == 0
    client = redis.Redis.from_url(redis_server.url)
    assert set(runs(client, app.namespace)) == set(range(n))
    stats = app.stats("q")
    assert (stats["ready"], stats["inflight"]) == (0, 0)
    client.close()


def test_a_job_past_its_timeout_is_interrupted_and_follows_its_retry_policy(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    job_id = app.enqueue("overrun", [1], queue="q")  # timeout_s=1, retries=1, sleeps 30 s
    app.enqueue_many("work", [(i,) for i in range(10, 20)], queue="q")
    pool = pools("-c", "2")
    wait_until(
        lambda: app.stats("q")["dead"] == 1 and app.stats("q")["processed"] == 10, 30, "the timeout"
    )
    assert pool.stop() == 0
    info = app.get_job(job_id, queue="q")
    assert info is not None and info.state == "dead"
    assert info.attempts == 2
    assert info.last_error == "JobTimeout: the job ran past its timeout_s=1"
    assert runs(r, app.namespace)[1] == 2


def test_ttin_ttou_change_the_number_of_children(pools: Callable[..., Pool]) -> None:
    pool = pools("-c", "2")
    pool.wait_children(2)
    pool.proc.send_signal(signal.SIGTTIN)
    pool.wait_children(3)
    # one at a time: two pending instances of a signal merge into one
    pool.proc.send_signal(signal.SIGTTOU)
    pool.wait_children(2)
    pool.proc.send_signal(signal.SIGTTOU)
    pool.wait_children(1)
    assert len(pool.children("reaper")) == 1
    assert pool.stop() == 0


def test_usr1_quiets_the_pool_for_a_deploy(app: fastq.App, pools: Callable[..., Pool]) -> None:
    pool = pools("-c", "2")
    pool.wait_children(2)
    pool.proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    app.enqueue_many("work", [(i,) for i in range(50)], queue="q")
    time.sleep(1.5)
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"]) == (0, 50)  # nothing claimed
    assert len(pool.children()) == 2  # but still up
    assert pool.stop() == 0


def test_children_stop_gracefully_when_the_master_dies(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    n = 1000
    app.enqueue_many("work", [(i, 0.005) for i in range(n)], queue="q")
    pool = pools("-c", "2", "--batch", "10")
    workers = pool.wait_children(2)
    wait_until(lambda: app.stats("q")["processed"] >= 50, 30, "some progress")
    reaper = pool.wait_children(1, "reaper")
    pool.kill()  # SIGKILL the master alone
    for child in workers + reaper:
        child.wait(timeout=15)  # they notice and stop on their own; the reaper too
    stats = app.stats("q")
    ran = runs(r, app.namespace)
    assert stats["inflight"] == 0  # prefetched jobs were handed back, not left leased
    assert set(ran.values()) == {1}
    assert stats["ready"] + len(ran) == n


def test_a_child_that_cannot_boot_stops_the_pool_instead_of_crash_looping(
    redis_server: RedisServer,
) -> None:
    proc = subprocess.run(
        fastq_cmd("pool", "--app", "tests.apps.pool_jobs", "-q", "q", "-c", "2"),
        env=subprocess_env(redis_server.url, POOL_JOBS_FAIL_BOOT="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 4, proc.stderr
    assert "cannot open the SMTP connection pool" in proc.stderr
    assert "could not boot; stopping instead of crash-looping" in proc.stderr
    assert proc.stderr.count("spawned worker") <= 2


def test_cpu_slots_never_serialize_jobs_that_wait(
    app: fastq.App, pools: Callable[..., Pool]
) -> None:
    # 8 children, 1 CPU slot: jobs that sleep must still run 8 at a time
    app.enqueue_many("work", [(i, 0.2) for i in range(80)], queue="q")
    t0 = time.monotonic()
    pool = pools("-c", "8", "--cpu-slots", "1", "--batch", "2")
    wait_until(lambda: app.stats("q")["processed"] == 80, 30, "the drain")
    assert time.monotonic() - t0 < 8  # serialized it would take 16 s
    assert pool.stop() == 0


def test_cpu_slots_let_waiting_jobs_through_after_cpu_bound_ones(
    app: fastq.App, pools: Callable[..., Pool]
) -> None:
    # Children that learned their jobs were CPU-bound (and batches of 30 to 50)
    # meet a blast of jobs that wait. Judged by the old jobs, each would queue for
    # the one slot and claim 30 or more 0.2 s jobs before letting the next in: 6 s
    # or more. Idle for a while in between, they measure the new jobs afresh.
    pool = pools("-c", "8", "--cpu-slots", "1", "--batch", "50")
    pool.wait_children(8)
    # in waves: the slot passes on whenever its holder goes idle, so that many
    # children run CPU-bound batches
    for wave in range(1, 9):
        app.enqueue_many("spin", [(i, 0.002) for i in range(60)], queue="q")
        wait_until(lambda n=60 * wave: app.stats("q")["processed"] == n, 60, "a wave")
        time.sleep(0.1)
    time.sleep(1.0)  # every child idle for a while
    t0 = time.monotonic()
    app.enqueue_many("work", [(i, 0.2) for i in range(80)], queue="q")
    wait_until(lambda: app.stats("q")["processed"] == 560, 60, "the drain of waiting jobs")
    assert time.monotonic() - t0 < 5  # 8 children at once: 2 s, plus the ramp
    assert pool.stop() == 0


def test_cpu_slots_keep_cpu_bound_children_from_time_slicing_each_other(
    app: fastq.App, pools: Callable[..., Pool]
) -> None:
    # 10 ms of CPU a job and a line appended to a file: CPU-bound even on a loaded
    # host (an fsynced RPUSH a job, on a busy disk, made children look waiting)
    app.enqueue_many("spin", [(i, 0.01) for i in range(200)], queue="q")
    pool = pools("-c", "4", "--cpu-slots", "1", "--batch", "5")
    wait_until(lambda: app.stats("q")["processed"] == 200, 60, "the drain")
    assert pool.stop() == 0
    by_pid: dict[str, list[tuple[float, float]]] = {}
    for line in pool.runs_file.read_text().splitlines():
        pid, start, end = line.split()
        by_pid.setdefault(pid, []).append((float(start), float(end)))
    # from the first batch on: a child that has not measured its jobs yet waits
    # for a slot as if they were CPU-bound
    events = []
    for spans in by_pid.values():
        for start, end in spans:
            events += [(start, 1), (end, -1)]
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    assert peak <= 2  # without slots, 4 spinning children overlap 4 deep


def test_the_master_kills_a_child_whose_job_ignores_its_timeout(
    app: fastq.App, r: redis.Redis, pools: Callable[..., Pool]
) -> None:
    job_id = app.enqueue("stubborn", [999], queue="q")
    app.enqueue_many("work", [(i,) for i in range(20)], queue="q")
    pool = pools("-c", "2", "--max-stalls", "1")
    # each run is killed ~2 s past its 0.5 s timeout and counts a stall; the second is fatal
    wait_until(lambda: app.stats("q")["dead"] == 1, 40, "the poison job to be buried")
    wait_until(lambda: app.stats("q")["processed"] == 20, 20, "the other jobs")
    assert pool.stop() == 0
    info = app.get_job(job_id, queue="q")
    assert info is not None and info.state == "dead"
    assert "stalled 2 times" in (info.last_error or "")
    assert runs(r, app.namespace)[999] == 2, pool.log()
    assert "past its timeout; killing it" in pool.log()


def test_a_stop_that_lands_as_a_child_is_forked_is_not_lost(pools: Callable[..., Pool]) -> None:
    # A SIGTERM sent right after a respawn used to reach the child while it still
    # ran the master's handler, and vanish: the child idled on, the pool never stopped.
    for trial in range(10):
        pool = pools("-c", "1")
        worker = pool.wait_children(1)[0]
        worker.kill()  # the master respawns at once...
        time.sleep(0.002 * trial)
        pool.proc.send_signal(signal.SIGTERM)  # ...and the stop lands as it boots
        try:
            assert pool.proc.wait(timeout=10) == 0, f"trial {trial}"
        except subprocess.TimeoutExpired:
            raise AssertionError(f"trial {trial}: the pool did not stop") from None
