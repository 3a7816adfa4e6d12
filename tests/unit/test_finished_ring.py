"""The heartbeat slot's ring of finished jobs: what the master acknowledges for a
child that died (fastq.shm.heartbeat). No Redis, no fork."""

from __future__ import annotations

from fastq.shm.heartbeat import MAX_ENTRY_ID_BYTES, HeartbeatBoard


def test_the_master_reads_what_finished_past_the_last_answered_ack() -> None:
    board = HeartbeatBoard(2, records=3, ring_size=8)
    try:
        slot = board.slot(1)
        slot.reset()
        for i in range(5):
            slot.finished(i % 2, b"job-%d" % i)
        assert slot.finished_count == 5
        slot.acked(3)  # a round trip carrying the first three was answered
        assert slot.finished_unacked() == [(1, b"job-3"), (0, b"job-4")]
        assert board.slot(0).finished_unacked() == []  # slots do not overlap
        slot.hold(2, 0, b"in-flight")  # the in-flight records are apart from the ring
        assert slot.held() == [(0, b"in-flight")]
        assert slot.finished_unacked() == [(1, b"job-3"), (0, b"job-4")]
        slot.reset()  # a fresh child
        assert slot.finished_unacked() == [] and slot.finished_count == 0
    finally:
        board.close()


def test_a_full_ring_keeps_the_newest_and_skips_ids_too_long() -> None:
    board = HeartbeatBoard(1, ring_size=4)
    try:
        slot = board.slot(0)
        slot.reset()
        slot.finished(0, b"x" * (MAX_ENTRY_ID_BYTES + 1))  # not noted: it runs again
        for i in range(10):
            slot.finished(0, b"job-%d" % i)
        # the oldest six were overwritten: after a kill those run again, as before
        assert [job_id for _, job_id in slot.finished_unacked()] == [
            b"job-6",
            b"job-7",
            b"job-8",
            b"job-9",
        ]
        slot.acked(10)
        assert slot.finished_unacked() == []
    finally:
        board.close()


def test_a_board_without_a_ring_notes_nothing() -> None:
    board = HeartbeatBoard(1, ring_size=0)
    try:
        slot = board.slot(0)
        slot.reset()
        slot.finished(0, b"job")
        slot.acked(1)
        assert slot.finished_count == 0 and slot.finished_unacked() == []
    finally:
        board.close()


def test_many_noted_at_once_read_back_as_noted_one_by_one() -> None:
    board = HeartbeatBoard(1, ring_size=8)
    try:
        slot = board.slot(0)
        slot.reset()
        slot.finished_many(2, [b"a", b"x" * (MAX_ENTRY_ID_BYTES + 1), b"b"])
        slot.finished(1, b"c")
        assert slot.finished_count == 3
        assert slot.finished_unacked() == [(2, b"a"), (2, b"b"), (1, b"c")]
    finally:
        board.close()
