"""A pool worker's heartbeat slot says when it waits for work: a starting pool
forks its second wave on that (fastq.pool.ramp)."""

from __future__ import annotations

import threading
import time
from typing import Callable

import fastq
from fastq.shm.heartbeat import HeartbeatBoard
from fastq.worker.worker import Worker


def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_the_slot_says_waiting_while_the_queue_is_empty_and_not_once_work_comes(
    app: fastq.App,
) -> None:
    ran: list[int] = []

    @app.job(queue="q")
    def note(i: int) -> None:
        assert not board.slot(0).waiting  # woken to run it: no longer waiting
        ran.append(i)

    board = HeartbeatBoard(1)
    worker = Worker(app, ["q"], handle_signals=False, idle_timeout_s=1, slot=board.slot(0))
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        assert not board.slot(0).waiting
        thread.start()
        wait_until(lambda: board.slot(0).waiting, "the worker to wait for work")
        note.enqueue(7)
        wait_until(lambda: ran == [7], "the job to run")
        wait_until(lambda: board.slot(0).waiting, "the worker to wait again")
        worker.stop()  # taken at the end of this wait (1 s at most)
        thread.join(10)
        assert not thread.is_alive()
        assert not board.slot(0).waiting
    finally:
        worker.stop()
        thread.join(10)
        board.close()
