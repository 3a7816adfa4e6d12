"""What a pool announces in the worker registry (:mod:`fastq.protocol.workers`), by
an :class:`fastq.monitor.announcer.Announcer`: itself and each child, read from the
heartbeat board the children already write (the job each runs and since when, the
jobs in flight of its async or thread slots, the jobs it finished) and from psutil
(memory). Read by the master's announcer thread: nothing here talks to Redis or to
the children."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import psutil

from fastq.monitor.announcer import Announcer, process_fields
from fastq.shm.heartbeat import HeartbeatBoard, HeartbeatSlot

if TYPE_CHECKING:
    from fastq.app import App
    from fastq.pool.handback import HandBacks


def child_fields(
    kind: str, pid: int, slot: Optional[HeartbeatSlot], queues: list[str]
) -> dict[str, Any]:
    """One child: its memory, and from its heartbeat slot what it runs now (the job
    and since when, or idle), its async or thread slots' jobs, the jobs it finished."""
    entry: dict[str, Any] = {
        "kind": kind,
        "pid": pid,
        "state": "idle" if kind == "worker" else None,
    }
    try:
        process = psutil.Process(pid)
        entry["rss"] = process.memory_info().rss
        entry["started_at"] = round(process.create_time(), 3)
    except psutil.Error:
        entry["rss"] = None
    if slot is None or kind != "worker":
        return entry
    wall_minus_mono = time.time() - time.monotonic()
    running = slot.running()
    if running is not None:
        index, job_id, started, _ = running
        entry["state"] = "busy"
        entry["job"] = {
            "queue": _queue(queues, index),
            "id": job_id.decode(errors="replace") if job_id is not None else None,
            "since": round(started + wall_minus_mono, 3),
        }
    in_flight = [
        {"queue": _queue(queues, index), "id": job_id.decode(errors="replace")}
        for index, job_id in slot.held()
    ]
    if in_flight:
        entry["state"] = "busy"
        entry["in_flight"] = in_flight
    elif running is None and slot.waiting:
        entry["state"] = "waiting"  # for work: its queues are empty
    entry["jobs_done"] = slot.finished_count  # succeeded (not those keeping a result)
    return entry


def _queue(queues: list[str], index: int) -> Optional[str]:
    return queues[index] if 0 <= index < len(queues) else None


def pool_snapshot(
    base: dict[str, Any],
    board: HeartbeatBoard,
    children: Callable[[], list[tuple[str, int, int]]],
    queues: Callable[[], list[str]],
    wanted: Callable[[], int],
) -> Callable[[], dict[str, Any]]:
    """The snapshot function of a pool's announcer. ``children()``: ``(kind, pid,
    slot)`` of each live child; ``queues()``: the queues served (a HUP may change
    them); ``wanted()``: the worker children it keeps."""

    def snapshot() -> dict[str, Any]:
        served = queues()
        entry = dict(base, queues=list(served), children_wanted=wanted())
        entry["children"] = [
            child_fields(kind, pid, board.slot(slot) if slot >= 0 else None, served)
            for kind, pid, slot in sorted(children(), key=lambda c: (c[0] != "worker", c[2]))
        ]
        return entry

    return snapshot


def pool_announcer(
    app: App,
    pid: int,
    board: HeartbeatBoard,
    children: Callable[[], list[tuple[str, int, int]]],
    queues: Callable[[], list[str]],
    wanted: Callable[[], int],
    hand_backs: HandBacks,
) -> Announcer:
    """The pool's entry in the worker registry, kept by a thread of its own (started
    here) with the hand-backs' client settings, under their fork gate."""
    base = process_fields("pool", pid, [], app.redis_url, app.namespace)
    base["id"] = f"{base['host']}:{pid}"
    snapshot = pool_snapshot(base, board, children, queues, wanted)
    announcer = Announcer(
        hand_backs.connect,
        app.namespace,
        base["id"],
        snapshot,
        f"master {pid}",
        gate=hand_backs.fork_gate,
        changes=lambda: sorted(children()),
    )
    announcer.start()
    return announcer
