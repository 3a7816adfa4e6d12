"""CPU slots: a slot is held by one process at a time, and freed when it dies."""

from __future__ import annotations

import os
import signal
import time

import pytest

from fastq.shm.cpuslots import CpuSlots


def _fork(fn: object) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            fn()  # type: ignore[operator]
        finally:
            os._exit(0)
    return pid


@pytest.mark.timeout(30)
def test_a_slot_is_exclusive_and_freed_when_its_holder_is_killed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    slots = CpuSlots(1)
    marker = tmp_path / "got-it"
    holder = _fork(lambda: (slots.acquire(), time.sleep(60)))
    time.sleep(0.3)
    waiter = _fork(lambda: (slots.acquire(), marker.write_text("yes")))
    time.sleep(0.5)
    assert not marker.exists(), "two processes held the only slot"
    os.kill(holder, signal.SIGKILL)  # no release: the kernel drops the lock
    os.waitpid(holder, 0)
    os.waitpid(waiter, 0)
    assert marker.read_text() == "yes"


def test_release_lets_another_in_and_acquire_is_idempotent() -> None:
    slots = CpuSlots(2)
    slots.acquire()
    first = slots.held
    slots.acquire()
    assert slots.held == first
    slots.release()
    assert slots.held is None
    slots.release()  # harmless


def test_zero_slots_is_refused() -> None:
    with pytest.raises(ValueError):
        CpuSlots(0)


def test_a_childs_verdict_reaches_its_siblings_and_the_master() -> None:
    slots = CpuSlots(2)
    assert slots.last_verdict() is None  # no batch ran yet
    for cpu_bound in (False, True):
        pid = _fork(lambda cpu_bound=cpu_bound: slots.note_verdict(cpu_bound))
        _, status = os.waitpid(pid, 0)
        assert status == 0
        assert slots.last_verdict() is cpu_bound
