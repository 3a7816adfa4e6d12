"""Shared by the fault tests of real pools: a ``fastq pool`` subprocess, waits, the
record of runs (their fixtures, a durable server of the test's own and pools killed
at the end, are in ``tests/fault/conftest.py``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import psutil
import redis

from tests.support.processes import fastq_cmd, subprocess_env


class Pool:
    """A ``fastq pool`` subprocess on the test app ``tests.apps.pool_jobs`` (or ``app``)."""

    def __init__(
        self,
        url: str,
        namespace: str,
        log_path: Path,
        *args: str,
        wrap: Sequence[str] = (),
        app: str = "tests.apps.pool_jobs",
        env: Optional[dict[str, str]] = None,
    ) -> None:
        """``wrap``: a command that runs the pool's (``ip netns exec NAME``): it must
        exec it, so that the pool is the process started. ``env``: more variables of
        its environment."""
        self.log_path = log_path
        # where the ``note`` job records its runs
        self.runs_file = log_path.with_name("runs.txt")
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*wrap]
                + fastq_cmd(
                    "pool",
                    "--app",
                    app,
                    "--namespace",
                    namespace,
                    "-q",
                    "q",
                    *args,
                ),
                env=subprocess_env(url, POOL_JOBS_RUNS_FILE=str(self.runs_file), **(env or {})),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def children(self, kind: str = "worker") -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        out = []
        for kid in kids:
            try:
                if kid.name() == f"fastq-{kind}" and kid.status() != psutil.STATUS_ZOMBIE:
                    out.append(kid)
            except psutil.NoSuchProcess:
                pass
        return out

    def wait_children(
        self, n: int, kind: str = "worker", timeout_s: float = 20
    ) -> list[psutil.Process]:
        wait_until(lambda: len(self.children(kind)) == n, timeout_s, f"{n} {kind} children")
        return self.children(kind)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill_children_while(
    children: Callable[[], list[psutil.Process]],
    busy: Callable[[], bool],
    *,
    max_kills: int,
    every_s: float,
    working: Optional[Callable[[], set[int]]] = None,
) -> int:
    """SIGKILL a random child (of ``children()``) every ``every_s`` while ``busy()``,
    at most ``max_kills`` times; returns how many were killed. With ``working`` (the
    pids that have run a job), only a child that has started on its jobs is killed:
    one just respawned, still booting, holds nothing a kill could test."""
    kills = 0
    while busy() and kills < max_kills:
        time.sleep(every_s)
        victims = children()
        if working is not None:
            started = working()
            victims = [child for child in victims if child.pid in started]
        if victims:
            try:
                random.choice(victims).kill()
            except psutil.NoSuchProcess:  # it died between the listing and the kill
                continue
            kills += 1
    return kills


def drain_while_killing_children(
    app: Any,
    r: redis.Redis,
    pool: Pool,
    n: int,
    slots_per_child: int,
    *,
    children: int = 2,
    until: float = 0.7,
    max_kills: int = 4,
    every_s: float = 0.3,
    min_kills: int = 2,
    in_flight: Optional[int] = None,
) -> tuple[int, int]:
    """With jobs 0..n-1 queued on ``q`` and ``pool`` starting ``children`` children of
    ``slots_per_child`` slots each (and stalls allowed enough that none goes dead):
    SIGKILL a child every ``every_s``, at most ``max_kills`` times, until ``until`` of
    the jobs are processed, then let the drain finish and stop the pool. Every job
    ran, nothing is left queued, held or dead, and a kill re-ran at most the jobs
    its child had in flight (``in_flight``, by default its slots: one for a child
    that runs one job at a time), never the finished jobs of its batch. Returns
    ``(re-runs, kills)``.

    The jobs must set how long the drain lasts, not fastq's speed: reaching
    ``until`` must take longer than ``min_kills`` kills, with fastq infinitely fast
    (jobs × their sleep / slots), twice over. Beyond 4 kills, a fifth death within
    10 s makes the master back off its respawns (up to 4 s), which only slows the
    drain."""
    pool.wait_children(children)
    kills = kill_children_while(
        pool.children,
        lambda: app.stats("q")["processed"] < n * until,
        max_kills=max_kills,
        every_s=every_s,
        working=lambda: {int(pid) for pid in r.smembers(f"{app.namespace}:pids")},
    )
    wait_until(lambda: app.stats("q")["processed"] == n, 90, "the drain")
    assert pool.stop() == 0, pool.log()
    ran = runs(r, app.namespace)
    assert set(ran) == set(range(n)), "a job was lost"
    duplicates = sum(v - 1 for v in ran.values())
    stats = app.stats("q")
    assert (stats["processed"], stats["ready"], stats["inflight"], stats["dead"]) == (n, 0, 0, 0)
    # a killed child held at most its slots, plus jobs that finished unacknowledged
    # (at most its slots again): the round trip that acks them also claims; of
    # those, the finished ones were acknowledged by the master, not re-run
    assert stats["stalled"] + stats["orphaned"] <= kills * 2 * slots_per_child
    assert duplicates <= kills * (slots_per_child if in_flight is None else in_flight)
    assert kills >= min_kills, "the drain ended before the test could kill anything"
    return duplicates, kills


def lose_host(pool: Pool, workers: list[psutil.Process]) -> None:
    """The host is lost: the pool's master, its workers and its reaper SIGKILLed at once."""
    assert pool.proc is not None
    for pid in [pool.proc.pid] + [k.pid for k in workers + pool.children("reaper")]:
        os.kill(pid, signal.SIGKILL)
    pool.proc.wait()


def recover_lost_host(
    app: Any, r: redis.Redis, url: str, pools: Callable[..., Pool], n: int, leased: int
) -> None:
    """After ``lose_host``: a reaper of its own takes back the ``leased`` jobs of the
    lost pool when their leases expire, then a second pool (no reaper) finishes the
    drain. Every one of the ``n`` jobs ran; nothing is left queued, held or dead."""
    reaper = subprocess.Popen(
        fastq_cmd(
            "reaper",
            "--app",
            "tests.apps.pool_jobs",
            "--namespace",
            app.namespace,
            "--interval",
            "0.2",
        ),
        env=subprocess_env(url),
    )
    try:
        wait_until(
            lambda: app.stats("q")["stalled"] >= leased, 10, "the reaper to take back leases"
        )
        assert app.stats("q")["inflight"] == 0
        second = pools("-c", "2", "--no-reaper")
        wait_until(lambda: app.stats("q")["processed"] == n, 60, "the new pool to finish")
        assert second.stop() == 0
    finally:
        reaper.terminate()
        assert reaper.wait(timeout=10) == 0
    assert set(runs(r, app.namespace)) == set(range(n))
    stats = app.stats("q")
    assert (stats["ready"], stats["inflight"], stats["dead"]) == (0, 0, 0)


def gone(proc: psutil.Process) -> bool:
    """Dead, or a zombie its parent has not reaped yet (which may happen meanwhile)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def runs(r: redis.Redis, ns: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in r.hgetall(f"{ns}:runs").items()}


def noted_runs(pool: Pool) -> Counter[int]:
    """The runs the ``note`` job recorded in the pool's runs file: i -> times run."""
    if not pool.runs_file.exists():
        return Counter()
    return Counter(int(line) for line in pool.runs_file.read_text().split())
