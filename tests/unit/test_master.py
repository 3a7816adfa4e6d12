"""The master's life-cycle policy, with fork, waitpid and kill patched (the shape of
gunicorn's tests/test_arbiter.py): no process is forked and no Redis is needed."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import fastq
from fastq.pool import master as master_module
from fastq.pool.handback import HandBack
from fastq.pool.master import EXIT_BOOT, KILL_GRACE_S, Child, Master, PoolConfig
from fastq.protocol.contracts import ReleaseMode
from fastq.worker.options import WorkerOptions


class FakeOS:
    """Stands in for fork, waitpid and kill: forks hand out pids, kills are recorded,
    and exits are queued by the test for waitpid to report."""

    def __init__(self) -> None:
        self.next_pid = 1000
        self.kills: list[tuple[int, int]] = []
        self.exits: list[tuple[int, int]] = []

    def fork(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        if self.exits:
            return self.exits.pop(0)
        if options & os.WNOHANG:
            return 0, 0
        raise ChildProcessError

    def kill(self, pid: int, sig: int) -> None:
        self.kills.append((pid, sig))

    def exit(self, pid: int, code: int = 0, sig: int = 0) -> None:
        """Queue a child's exit: a status code, or death by ``sig``."""
        self.exits.append((pid, sig if sig else code << 8))


@pytest.fixture
def fake_os(monkeypatch: pytest.MonkeyPatch) -> FakeOS:
    fake = FakeOS()
    monkeypatch.setattr(master_module.os, "fork", fake.fork)
    monkeypatch.setattr(master_module.os, "waitpid", fake.waitpid)
    monkeypatch.setattr(master_module.os, "kill", fake.kill)
    return fake


class RecordedHandBacks:
    def __init__(self) -> None:
        self.queued: list[HandBack] = []
        self.fork_gate = threading.Lock()

    def put(self, hand_back: HandBack) -> None:
        self.queued.append(hand_back)


@pytest.fixture
def master(fake_os: FakeOS) -> Iterator[Master]:
    app = fastq.App("redis://127.0.0.1:1/0", namespace="unit")
    # first_wave=2: the whole pool at once, whatever this machine's CPU count
    config = PoolConfig(children=2, queues=["q", "r"], child_timeout_s=5.0, first_wave=2)
    m = Master(app, config)
    m.hand_backs = RecordedHandBacks()  # type: ignore[assignment]
    m.pid = os.getpid()
    yield m
    m.board.close()


def started(master: Master) -> dict[str, list[Child]]:
    master.manage_children()
    kinds: dict[str, list[Child]] = {"worker": [], "reaper": []}
    for child in master.children.values():
        kinds[child.kind].append(child)
    return kinds


def set_last_beat(master: Master, child: Child, when: float) -> None:
    struct.pack_into("d", master.board._buf, child.slot * master.board.slot_size, when)


def test_it_spawns_the_workers_and_one_reaper_each_with_a_slot_of_its_own(
    master: Master,
) -> None:
    kinds = started(master)
    assert len(kinds["worker"]) == 2 and len(kinds["reaper"]) == 1
    slots = [c.slot for c in master.children.values()]
    assert len(set(slots)) == 3 and all(s >= 0 for s in slots)
    master.manage_children()
    assert len(master.children) == 3  # nothing more while all are up


def test_a_worker_that_dies_has_its_jobs_handed_back_without_waiting_on_redis(
    master: Master, fake_os: FakeOS, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_redis(*args: Any) -> None:
        raise AssertionError("the supervision loop called Redis")

    monkeypatch.setattr(master_module.scripts, "call", no_redis)
    monkeypatch.setattr(master_module.scripts, "call_many", no_redis)
    worker = started(master)["worker"][0]
    master.board.slot(worker.slot).start_job(1, b"job-7", None)  # running on queue "r"
    fake_os.exit(worker.pid, sig=signal.SIGKILL)
    master.reap_children()
    assert worker.pid not in master.children
    assert master.hand_backs.queued == [  # type: ignore[attr-defined]
        HandBack(
            worker.worker_id,
            (1, b"job-7"),
            ReleaseMode.STALLED,
            ReleaseMode.ORPHANED,
            cause="was killed by SIGKILL",
            slot_index=worker.slot,
        )
    ]
    assert not master.crashes  # a job's fault: no crash-loop backoff for the others
    master.manage_children()
    assert len(master.workers()) == 2  # replaced
    # in another slot: the dead one's board is read by a pool after this one, were
    # this one killed before its hand-back is sent
    assert worker.slot not in {w.slot for w in master.workers()}
    assert worker.slot in master.unsent_slots
    master.hand_back_sent(master.hand_backs.queued[0])  # type: ignore[attr-defined]
    assert worker.slot not in master.unsent_slots and worker.slot in master.free_slots()


def test_an_exit_nobody_asked_for_counts_its_jobs_orphaned_even_with_status_0(
    master: Master, fake_os: FakeOS
) -> None:
    worker = started(master)["worker"][0]
    master.board.slot(worker.slot).start_job(0, b"job-1", None)
    fake_os.exit(worker.pid, code=0)  # os._exit(0) in a job
    master.reap_children()
    (hand_back,) = master.hand_backs.queued  # type: ignore[attr-defined]
    assert (hand_back.running, hand_back.running_mode, hand_back.rest_mode) == (
        (0, b"job-1"),
        ReleaseMode.STALLED,
        ReleaseMode.ORPHANED,
    )
    assert hand_back.cause == "exited with status 0 (sys.exit() or os._exit() in the job?)"


def test_jobs_of_a_hard_stop_are_interrupted_not_stalled(master: Master, fake_os: FakeOS) -> None:
    worker = started(master)["worker"][0]
    master.board.slot(worker.slot).start_job(0, b"long-job", None)
    master.stop_gracefully()
    master.stop_hard()  # the operator's second Ctrl-C
    assert (worker.pid, signal.SIGTERM) in fake_os.kills
    fake_os.exit(worker.pid, sig=signal.SIGKILL)
    master.reap_children()
    (hand_back,) = master.hand_backs.queued  # type: ignore[attr-defined]
    assert (hand_back.running, hand_back.running_mode) == (
        (0, b"long-job"),
        ReleaseMode.INTERRUPTED,
    )
    assert not master.crashes  # an expected exit


def test_a_crash_loop_backs_off_instead_of_respawning_at_once(
    master: Master, fake_os: FakeOS
) -> None:
    for _ in range(5):
        worker = started(master)["worker"][0]
        fake_os.exit(worker.pid, code=1)
        master.reap_children()
    assert master.spawn_after > time.monotonic()
    forks = fake_os.next_pid
    master.manage_children()
    assert fake_os.next_pid == forks, "respawned during the backoff"


def test_a_reaper_that_crash_loops_backs_off_too(master: Master, fake_os: FakeOS) -> None:
    for _ in range(5):
        reaper = started(master)["reaper"][0]
        fake_os.exit(reaper.pid, code=1)
        master.reap_children()
    assert master.spawn_after > time.monotonic()
    master.manage_children()
    assert not any(c.kind == "reaper" for c in master.children.values())
    assert not master.hand_backs.queued  # type: ignore[attr-defined]  # a reaper holds no jobs


def test_a_child_that_cannot_boot_halts_the_pool(master: Master, fake_os: FakeOS) -> None:
    worker = started(master)["worker"][0]
    fake_os.exit(worker.pid, code=EXIT_BOOT)
    master.reap_children()
    assert master.halted and master.exit_code == EXIT_BOOT


@pytest.mark.parametrize("kind", ["worker", "reaper"])
def test_a_silent_child_gets_sigterm_then_sigkill(
    master: Master, fake_os: FakeOS, kind: str
) -> None:
    child = started(master)[kind][0]
    for other in master.children.values():
        set_last_beat(master, other, time.monotonic())
    set_last_beat(master, child, time.monotonic() - 6)  # child_timeout_s is 5
    master.murder_stuck()
    assert fake_os.kills == [(child.pid, signal.SIGTERM)]
    master.murder_stuck()  # within the grace: nothing more
    assert len(fake_os.kills) == 1
    assert child.term_sent_at is not None
    child.term_sent_at -= KILL_GRACE_S + 0.1
    master.murder_stuck()
    assert fake_os.kills[-1] == (child.pid, signal.SIGKILL) and child.killed


def test_no_fork_while_the_hand_back_thread_does_io(master: Master, fake_os: FakeOS) -> None:
    with master.hand_backs.fork_gate:
        master.manage_children()
        assert not master.children  # postponed to the next turn of the loop
    master.manage_children()
    assert len(master.children) == 3


def test_a_signal_handler_only_enqueues(master: Master, fake_os: FakeOS) -> None:
    master.init_signals()
    try:
        started(master)
        master._enqueue_signal(signal.SIGTERM, None)
        assert not master.stopping and not fake_os.kills  # nothing done in the handler
        master.wait_for_signals(0.0)
        master.handle_signals()
        assert master.stopping
        assert {sig for _, sig in fake_os.kills} == {signal.SIGTERM}
        assert len(fake_os.kills) == 3  # every child asked to stop, the reaper too
    finally:
        for sig in master_module._HANDLED:
            signal.signal(sig, signal.SIG_DFL)
        for fd in master._pipe:
            os.close(fd)


# -- start-up in two waves (fastq.pool.ramp) ---------------------------------------------------


@pytest.fixture
def big(fake_os: FakeOS) -> Iterator[Master]:
    """A pool of 8 workers that forks 2 first."""
    app = fastq.App("redis://127.0.0.1:1/0", namespace="unit")
    m = Master(app, PoolConfig(children=8, queues=["q"], first_wave=2))
    m.hand_backs = RecordedHandBacks()  # type: ignore[assignment]
    m.pid = os.getpid()
    yield m
    m.board.close()


def test_a_starting_pool_forks_the_first_wave_and_waits(big: Master) -> None:
    kinds = started(big)
    assert len(kinds["worker"]) == 2 and not kinds["reaper"]  # the reaper comes later too
    big.manage_children()
    assert len(big.workers()) == 2 and not big.ramp.done


def start_job_ago(master: Master, child: Child, ago_s: float) -> None:
    master.board.slot(child.slot).start_job(0, b"job-1", None)
    at = child.slot * master.board.slot_size + 8
    struct.pack_into("d", master.board._buf, at, time.monotonic() - ago_s)


@pytest.mark.parametrize("signal_", ["waits for work", "sleeps in a job"])
def test_the_rest_are_forked_once_a_first_worker_says_more_would_pay(
    big: Master, signal_: str
) -> None:
    first = started(big)["worker"][0]
    if signal_ == "waits for work":
        big.board.slot(first.slot).waiting_for_work(True)
    else:
        start_job_ago(big, first, 0.01)  # an SMTP call, say
        big.ramp.asleep = lambda pid: pid == first.pid
    kinds = started(big)
    assert len(kinds["worker"]) == 8 and len(kinds["reaper"]) == 1
    assert big.ramp.reason == f"a worker {signal_}"


@pytest.mark.parametrize(
    ("ago_s", "asleep"),
    [(0.0, True), (0.01, False)],
    ids=["a quick job", "a job preempted or CPU-bound: runnable"],
)
def test_a_job_that_is_quick_or_not_asleep_forks_no_more(
    big: Master, ago_s: float, asleep: bool
) -> None:
    first = started(big)["worker"][0]
    start_job_ago(big, first, ago_s)
    big.ramp.asleep = lambda pid: asleep
    big.manage_children()
    assert len(big.workers()) == 2 and not big.ramp.done


def test_the_rest_are_forked_after_the_patience_whatever_the_first_wave_does(
    big: Master,
) -> None:
    started(big)
    assert big.ramp.started_at is not None
    big.ramp.started_at -= big.ramp.patience_s
    kinds = started(big)
    assert len(kinds["worker"]) == 8 and len(kinds["reaper"]) == 1


def test_after_the_start_a_dead_worker_is_replaced_at_once(big: Master, fake_os: FakeOS) -> None:
    big.ramp.started_at = time.monotonic() - big.ramp.patience_s
    workers = started(big)["worker"]
    assert len(workers) == 8
    for child in workers[:3]:
        fake_os.exit(child.pid, code=0)
    big.reap_children()
    big.manage_children()
    assert len(big.workers()) == 8  # no new ramp: all three back in one turn


def test_a_pool_no_bigger_than_its_first_wave_starts_whole(fake_os: FakeOS) -> None:
    app = fastq.App("redis://127.0.0.1:1/0", namespace="unit")
    m = Master(app, PoolConfig(children=3, queues=["q"], first_wave=4))
    m.hand_backs = RecordedHandBacks()  # type: ignore[assignment]
    try:
        kinds = started(m)
        assert len(kinds["worker"]) == 3 and len(kinds["reaper"]) == 1
        assert m.ramp.first_wave == 3
    finally:
        m.board.close()


def test_asleep_tells_a_sleeping_process_from_a_running_one() -> None:
    from fastq.pool.ramp import asleep

    assert not asleep(os.getpid())  # this process runs the test
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while not asleep(sleeper.pid):  # once it has started
            assert time.monotonic() < deadline, "the sleeper never went to sleep"
            time.sleep(0.01)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not asleep(sleeper.pid)  # no such process


def test_a_dead_child_hands_back_every_job_it_held_in_flight(fake_os: FakeOS) -> None:
    app = fastq.App("redis://127.0.0.1:1/0", namespace="unit")
    config = PoolConfig(
        children=1, queues=["q", "r"], first_wave=1, worker=WorkerOptions(async_jobs=3)
    )
    m = Master(app, config)
    m.hand_backs = RecordedHandBacks()  # type: ignore[assignment]
    m.pid = os.getpid()
    try:
        worker = started(m)["worker"][0]
        slot = m.board.slot(worker.slot)
        slot.hold(0, 0, b"a")
        slot.hold(1, 1, b"b")
        slot.hold(2, 0, b"x" * 200)  # too long to note: back with the other leases
        slot.hold(1, 1, b"c")  # record 1 reused once "b" ended
        fake_os.exit(worker.pid, sig=signal.SIGKILL)
        m.reap_children()
        (hand_back,) = m.hand_backs.queued  # type: ignore[attr-defined]
        assert hand_back.held == ((0, b"a"), (1, b"c"))
        assert hand_back.running_mode == ReleaseMode.STALLED
    finally:
        m.board.close()


def test_only_the_job_that_blocked_the_loop_counts_a_stall() -> None:
    from fastq.shm.heartbeat import HeartbeatBoard

    board = HeartbeatBoard(2, records=4)
    try:
        slot = board.slot(1)
        slot.reset()
        for record, job_id in enumerate([b"j0", b"j1", b"j2"]):
            slot.hold(record, 0, job_id)
        assert slot.held() == [(0, b"j0"), (0, b"j1"), (0, b"j2")]
        slot.blame(1)
        assert slot.held() == [(0, b"j1")]
        slot.let_go(1)  # it ended after all: nobody is blamed
        assert slot.held() == [(0, b"j0"), (0, b"j2")]
        assert board.slot(0).held() == []  # slots do not overlap
        slot.reset()
        assert slot.held() == []
    finally:
        board.close()


@pytest.mark.parametrize("blocked", [False, True])
def test_a_sync_job_beside_jobs_in_flight_alone_counts_a_stall(
    fake_os: FakeOS, blocked: bool
) -> None:
    app = fastq.App("redis://127.0.0.1:1/0", namespace="unit")
    config = PoolConfig(
        children=1, queues=["q"], first_wave=1, worker=WorkerOptions(async_jobs=2, threads=2)
    )
    m = Master(app, config)
    m.hand_backs = RecordedHandBacks()  # type: ignore[assignment]
    m.pid = os.getpid()
    try:
        worker = started(m)["worker"][0]
        slot = m.board.slot(worker.slot)
        assert slot.records == 4  # --async-jobs 2 and --threads 2
        slot.hold(0, 0, b"async")
        slot.hold(3, 0, b"thread")
        slot.start_job(0, b"sync", None)  # in the worker's thread
        if blocked:
            slot.blame(0)  # the loop's blocker is known: it alone
        fake_os.exit(worker.pid, sig=signal.SIGKILL)
        m.reap_children()
        (hand_back,) = m.hand_backs.queued  # type: ignore[attr-defined]
        if blocked:
            assert (hand_back.running, hand_back.held) == (None, ((0, b"async"),))
        else:
            assert (hand_back.running, hand_back.held) == ((0, b"sync"), ())
        assert hand_back.running_mode == ReleaseMode.STALLED
    finally:
        m.board.close()


def test_a_child_flushes_what_its_jobs_printed_before_it_exits(tmp_path: Path) -> None:
    """A pool's output sent to a file is block-buffered: a child leaving by
    os._exit must write out what its jobs printed first."""
    out = tmp_path / "out.txt"
    script = (
        "import sys\n"
        "from fastq.pool.children import run_child\n"
        "def main():\n"
        "    for i in range(1000):\n"
        "        print(f'sent {i}')\n"
        "run_child(main, (), lambda: None)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as in production
    with out.open("w") as stdout:
        done = subprocess.run([sys.executable, "-c", script], stdout=stdout, env=env, timeout=60)
    assert done.returncode == 0
    assert out.read_text().splitlines() == [f"sent {i}" for i in range(1000)]
