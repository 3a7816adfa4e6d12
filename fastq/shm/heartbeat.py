"""Child → master heartbeats through a shared mmap, one slot per child.

The master creates the board before forking, so every child inherits the same
memory. A child stamps its slot with ``time.monotonic()`` (CLOCK_MONOTONIC is
system-wide, so the master can compare) from a background thread that never
talks to Redis (leases are extended by another,
:class:`fastq.worker.leases.LeaseKeeper`), and notes the
job it is running: when a child dies, the master knows which job killed it (a
stall) and which of its leased jobs were merely waiting (handed back as they are).
Cheaper than gunicorn's temp-file mtimes, and it cannot block on a disk.

A child with many jobs in flight (``--async-jobs N``, :mod:`fastq.runners.aio`;
``--threads M``, :mod:`fastq.runners.threads`) has a table of N + M records after its
slot, one per job slot (queue index, id): when it dies, every job it held in
flight goes back at once, counted a stall. With an event loop its beat comes from
the loop, not from a thread: a loop a job blocks goes silent.

After the records comes the child's ring of finished jobs: each job that succeeded
is noted there (queue index, id) as it ends, and the ring's acknowledged mark moves
past it once a round trip that carried its ack has been answered. When a child
dies, the master acknowledges what the ring holds past the mark before it hands
the rest back: a kill re-runs the jobs in flight, not the finished jobs of their
batch whose ack had not gone out yet.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from typing import Callable, Iterable, Optional

log = logging.getLogger("fastq.worker")

# last_beat, job_started (0 = idle), job_deadline (0 = none), queue index, id length,
# waiting_since (0 = not waiting for work). fastq_ext/runner.pyx writes start_job's
# fields at these same offsets (its plain jobs): change both together.
_HEADER = struct.Struct("dddIId")
_WAITING_AT = struct.calcsize("dddII")  # waiting_since's offset in the slot
SLOT_SIZE = 256
MAX_ID_BYTES = SLOT_SIZE - _HEADER.size
UNKNOWN_ID = 0xFFFFFFFF  # the running job's id was too long to note
# An in-flight record: queue index, id length (0: free), blamed (the job blocks
# the loop), id. An id longer than a record holds is noted as unknown: its job
# comes back with the other leases, not counted a stall (no innocent job is
# guessed at).
_RECORD = struct.Struct("HHB3x")
_BLAMED_AT = 4
RECORD_SIZE = 64
MAX_RECORD_ID_BYTES = RECORD_SIZE - _RECORD.size
UNKNOWN_RECORD_ID = 0xFFFF
# The ring of finished jobs: a header (jobs noted, jobs acknowledged: both counts
# since the child started), then entries (queue index, id length, id). A child
# notes at most a round trip or two of jobs ahead of its acks (a batch is 1,000
# jobs at most, and one more is on the wire); past the ring's size the oldest are
# overwritten, and those come back after a kill as before: re-run, never lost.
# fastq_ext/runner.pyx writes entries at these same offsets: change both together.
_RING_HEADER = struct.Struct("QQ")
_ENTRY = struct.Struct("HH")
ENTRY_SIZE = 64
MAX_ENTRY_ID_BYTES = ENTRY_SIZE - _ENTRY.size
FINISHED_RING = 2048


class HeartbeatSlot:
    """One child's slot. Written by the child, read by the master."""

    __slots__ = ("_buf", "_offset", "records", "ring_at", "ring_size")

    def __init__(self, buf: mmap.mmap, offset: int, records: int = 0, ring_size: int = 0) -> None:
        self._buf = buf
        self._offset = offset
        self.records = records  # in-flight records after the slot
        # the ring of finished jobs, after the records (read by fastq_ext/runner.pyx)
        self.ring_at = offset + SLOT_SIZE + records * RECORD_SIZE
        self.ring_size = ring_size

    def reset(self) -> None:
        """A fresh child: beat now, no job, nothing finished."""
        _HEADER.pack_into(self._buf, self._offset, time.monotonic(), 0.0, 0.0, 0, 0, 0.0)
        start = self._offset + SLOT_SIZE
        self._buf[start : start + self.records * RECORD_SIZE] = bytes(self.records * RECORD_SIZE)
        if self.ring_size:
            _RING_HEADER.pack_into(self._buf, self.ring_at, 0, 0)

    # -- the ring of finished jobs (the child's side) -------------------------------------

    def finished(self, queue_index: int, job_id: bytes) -> None:
        """Note that job ``job_id`` succeeded (its ack is not sent yet). An id too
        long for an entry is not noted: after a kill it runs again, as before."""
        self.finished_many(queue_index, (job_id,))

    def finished_many(self, queue_index: int, job_ids: Iterable[bytes]) -> None:
        """``finished`` of each of ``job_ids``, the count written once at the end."""
        size = self.ring_size
        if not size:
            return
        buf, ring = self._buf, self.ring_at
        noted = start = struct.unpack_from("Q", buf, ring)[0]
        entries = ring + _RING_HEADER.size
        for job_id in job_ids:
            n = len(job_id)
            if n > MAX_ENTRY_ID_BYTES:
                continue
            at = entries + (noted % size) * ENTRY_SIZE
            _ENTRY.pack_into(buf, at, queue_index, n)
            buf[at + _ENTRY.size : at + _ENTRY.size + n] = job_id
            noted += 1
        if noted != start:  # after the entries: a kill never tears one
            struct.pack_into("Q", buf, ring, noted)

    @property
    def finished_count(self) -> int:
        """Jobs noted finished since the child started: what a round trip written
        now carries the acks of."""
        if not self.ring_size:
            return 0
        return int(struct.unpack_from("Q", self._buf, self.ring_at)[0])

    def acked(self, count: int) -> None:
        """The acks of the first ``count`` jobs noted finished were answered."""
        if self.ring_size:
            struct.pack_into("Q", self._buf, self.ring_at + 8, count)

    # -- the jobs running ------------------------------------------------------------

    def hold(self, record: int, queue_index: int, job_id: bytes) -> None:
        """Note job ``job_id`` in flight in record ``record`` (< ``records``)."""
        at = self._offset + SLOT_SIZE + record * RECORD_SIZE
        n = len(job_id)
        if n > MAX_RECORD_ID_BYTES:
            n = UNKNOWN_RECORD_ID
        else:
            self._buf[at + _RECORD.size : at + _RECORD.size + n] = job_id
        _RECORD.pack_into(self._buf, at, queue_index, n, 0)

    def blame(self, record: int) -> None:
        """The job of record ``record`` blocks the child's loop: if the child dies
        now, that job alone counts a stall."""
        self._buf[self._offset + SLOT_SIZE + record * RECORD_SIZE + _BLAMED_AT] = 1

    def let_go(self, record: int) -> None:
        """The job of record ``record`` ended (its outcome is the worker's to send)."""
        _RECORD.pack_into(self._buf, self._offset + SLOT_SIZE + record * RECORD_SIZE, 0, 0, 0)

    def beat(self) -> None:
        struct.pack_into("d", self._buf, self._offset, time.monotonic())

    def start_job(self, queue_index: int, job_id: bytes, timeout_s: Optional[float]) -> None:
        now = time.monotonic()
        deadline = now + timeout_s if timeout_s else 0.0
        n = len(job_id)
        if n > MAX_ID_BYTES:
            n = UNKNOWN_ID
        else:
            start = self._offset + _HEADER.size
            self._buf[start : start + n] = job_id
        struct.pack_into("ddII", self._buf, self._offset + 8, now, deadline, queue_index, n)

    def idle(self) -> None:
        struct.pack_into("dd", self._buf, self._offset + 8, 0.0, 0.0)

    def waiting_for_work(self, waiting: bool) -> None:
        """Note that the child waits for work (its queues are empty), or no longer."""
        since = time.monotonic() if waiting else 0.0
        struct.pack_into("d", self._buf, self._offset + _WAITING_AT, since)

    # -- the master's side ---------------------------------------------------------

    def finished_unacked(self) -> list[tuple[int, bytes]]:
        """``(queue_index, job_id)`` of each job the child noted finished whose ack
        was not answered (as many as the ring still holds), in the order they ended."""
        if not self.ring_size:
            return []
        buf, ring, size = self._buf, self.ring_at, self.ring_size
        noted, acked = _RING_HEADER.unpack_from(buf, ring)
        jobs: list[tuple[int, bytes]] = []
        for seq in range(max(acked, noted - size), noted):
            at = ring + _RING_HEADER.size + (seq % size) * ENTRY_SIZE
            queue_index, n = _ENTRY.unpack_from(buf, at)
            jobs.append((queue_index, bytes(buf[at + _ENTRY.size : at + _ENTRY.size + n])))
        return jobs

    @property
    def last_beat(self) -> float:
        return float(struct.unpack_from("d", self._buf, self._offset)[0])

    @property
    def waiting(self) -> bool:
        """Is the child waiting for work?"""
        return bool(struct.unpack_from("d", self._buf, self._offset + _WAITING_AT)[0])

    def running(self) -> Optional[tuple[int, Optional[bytes], float, float]]:
        """``(queue_index, job_id or None if unknown, started, deadline)`` of the job
        the child is running, or None when it is between jobs."""
        _, started, deadline, queue_index, n, _ = _HEADER.unpack_from(self._buf, self._offset)
        if started == 0.0:
            return None
        if n == UNKNOWN_ID:
            return queue_index, None, started, deadline
        start = self._offset + _HEADER.size
        return queue_index, bytes(self._buf[start : start + n]), started, deadline

    def loop_blamed(self) -> bool:
        """Does a record blame its job for blocking the child's loop?"""
        buf, at = self._buf, self._offset + SLOT_SIZE + _BLAMED_AT
        return any(buf[at + i * RECORD_SIZE] for i in range(self.records))

    def held(self) -> list[tuple[int, bytes]]:
        """``(queue_index, job_id)`` of each job the child holds in flight (those
        whose id was too long to note left out); only those blamed for blocking
        its loop if any is."""
        held: list[tuple[int, bytes]] = []
        blamed: list[tuple[int, bytes]] = []
        buf, at = self._buf, self._offset + SLOT_SIZE
        for _ in range(self.records):
            queue_index, n, blame = _RECORD.unpack_from(buf, at)
            if n and n != UNKNOWN_RECORD_ID:
                job = (queue_index, bytes(buf[at + _RECORD.size : at + _RECORD.size + n]))
                (blamed if blame else held).append(job)
            at += RECORD_SIZE
        return blamed or held


class HeartbeatBoard:
    """``slots`` heartbeat slots in one shared mapping, each with ``records``
    in-flight records (a child's ``--async-jobs``; 0 for one job at a time) and a
    ring of ``ring_size`` finished jobs (0: none kept).

    With ``path``, the mapping is that file's, created (it must not exist), so
    that it outlives its master: a pool started after the whole pool was killed
    reads its predecessor's board there (:mod:`fastq.pool.takeover`); ``open``
    maps an existing board's file. Without, it is anonymous.
    """

    def __init__(
        self,
        slots: int,
        records: int = 0,
        ring_size: int = FINISHED_RING,
        path: Optional[str] = None,
        *,
        create: bool = True,
    ) -> None:
        self.slots = slots
        self.records = records
        self.ring_size = ring_size
        self.path = path
        ring = _RING_HEADER.size + ring_size * ENTRY_SIZE if ring_size else 0
        self.slot_size = SLOT_SIZE + records * RECORD_SIZE + ring
        size = self.slot_size * max(slots, 1)
        if path is None:
            # anonymous and MAP_SHARED (Python's default): children share it after fork
            self._buf = mmap.mmap(-1, size)
            return
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)  # zeros, as an anonymous map's
            elif os.fstat(fd).st_size != size:
                raise ValueError(f"{path} is not a board of this shape")
            self._buf = mmap.mmap(fd, size)  # MAP_SHARED: children share it after fork
        finally:
            os.close(fd)

    @classmethod
    def open(cls, path: str, slots: int, records: int, ring_size: int) -> HeartbeatBoard:
        """The board another master made at ``path``, of that shape.

        Raises:
            OSError: no such file. ValueError: a file of another size.
        """
        return cls(slots, records, ring_size, path, create=False)

    def slot(self, index: int) -> HeartbeatSlot:
        if not 0 <= index < self.slots:
            raise IndexError(f"no heartbeat slot {index} (board has {self.slots})")
        return HeartbeatSlot(self._buf, index * self.slot_size, self.records, self.ring_size)

    def close(self) -> None:
        self._buf.close()


class Heartbeat(threading.Thread):
    """A worker's liveness beat, which never waits on Redis.

    Every ``beat_s`` it stamps the master's slot (if any): the stamp says the
    child's threads run, whatever Redis is doing, so a stalled Redis gets no
    healthy child killed. If the parent changes (the master died), it asks the
    worker to stop. ``watch``: called at every beat (a child whose event loop
    beats itself passes no slot, and a watch that says when that loop is stuck).
    """

    def __init__(
        self,
        on_orphaned: Callable[[], None],
        slot: Optional[HeartbeatSlot] = None,
        parent_pid: Optional[int] = None,
        beat_s: float = 1.0,
        watch: Optional[Callable[[], None]] = None,
    ) -> None:
        super().__init__(name="fastq-heartbeat", daemon=True)
        self.on_orphaned = on_orphaned
        self.slot = slot
        self.parent_pid = parent_pid
        self.beat_s = beat_s
        self.watch = watch
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(self.beat_s):
            if self.slot is not None:
                self.slot.beat()
            if self.watch is not None:
                self.watch()
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                self.parent_pid = None
                self.on_orphaned()
