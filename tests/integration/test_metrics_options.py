"""``--metrics-port`` without prometheus_client, and the board's sums across children."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import fastq
from fastq.protocol.outcomes import Outcomes
from fastq.shm.metrics import (
    BUCKETS_S,
    DEAD,
    DURATION_AT,
    FAILED,
    LATENCY_AT,
    PROCESSED,
    MetricsBoard,
    lengths,
)
from fastq.testing.redis_server import RedisServer
from tests.support.processes import fastq_cmd, subprocess_env


def test_metrics_port_without_prometheus_client_is_a_clear_error(
    redis_server: RedisServer, app: fastq.App, tmp_path: Path
) -> None:
    blocker = tmp_path / "prometheus_client"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = subprocess_env(redis_server.url)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = subprocess.run(
        fastq_cmd(
            "pool",
            "--app",
            "tests.apps.counting",
            "--namespace",
            app.namespace,
            "--metrics-port",
            "0",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "fastq: error: --metrics-port needs prometheus_client: pip install 'fastq[metrics]'"
    )


def test_a_gone_childs_counts_are_kept_when_its_slot_is_reused(app: fastq.App) -> None:
    @app.job(queue="q")
    def work() -> None:
        pass

    board = MetricsBoard(2, ["q"], app.registry)
    jobs = [(f"{i}".encode(), work, [], {}, 1, {}) for i in range(3)]
    first = board.child(0)
    out = Outcomes()
    before = lengths(out)
    out.done.extend(job[0] for job in jobs[:2])
    out.dead.append((b"2", b"{}"))
    first.batch("q", jobs, out, before, 0.003)  # type: ignore[arg-type]
    board.child(1).count("q", "work", PROCESSED, 5)

    def processed() -> float:
        cell = next(cell for queue, job, cell in board.cells(board.totals()) if job == "work")
        return cell[PROCESSED]

    assert processed() == 7
    board.fold(0)  # the child of slot 0 exited
    assert processed() == 7
    board.child(0).count("q", "work", PROCESSED)  # its replacement
    assert processed() == 8
    cell = next(cell for _, job, cell in board.cells(board.totals()) if job == "work")
    assert (cell[FAILED], cell[DEAD]) == (1, 1)


def test_a_mixed_batch_observes_each_jobs_time_under_its_own_name(app: fastq.App) -> None:
    @app.job(queue="q")
    def hold() -> None:
        pass

    @app.job(queue="q")
    def note() -> None:
        pass

    board = MetricsBoard(1, ["q"], app.registry)
    t_ms = 1_000  # enqueued long ago: a latency in the last bucket
    jobs = [(b"h", hold, [], {}, 1, {"t": t_ms})]
    jobs += [(f"{i}".encode(), note, [], {}, 1, {"t": t_ms}) for i in range(3)]
    out = Outcomes()
    before = lengths(out)
    out.done.extend(job[0] for job in jobs)
    board.child(0).batch("q", jobs, out, before, 0.004)  # type: ignore[arg-type]

    cells = {job: cell for _, job, cell in board.cells(board.totals())}
    for name, n in (("hold", 1), ("note", 3)):
        duration = cells[name][DURATION_AT : DURATION_AT + len(BUCKETS_S)]
        latency = cells[name][LATENCY_AT : LATENCY_AT + len(BUCKETS_S)]
        assert (cells[name][PROCESSED], sum(duration), sum(latency)) == (n, n, n)
        assert duration[BUCKETS_S.index(0.001)] == n  # 1 ms each: the batch's mean
