"""The master's children: its record of each (:class:`Child`), the table of them
(:class:`Children`: their heartbeat slots, the one way to signal them), and a child's
life once forked, as gunicorn's worker class holds both sides: it drops the master's
state, boots its worker (or reaper) and exits with a coded status, so that the master
tells a child that could not start (``EXIT_BOOT``: it stops rather than crash-loop)
from one that crashed."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, NoReturn, Optional

from fastq.app import App
from fastq.logs import print_whole_lines
from fastq.shm.cpuslots import CpuSlots
from fastq.shm.heartbeat import HeartbeatSlot
from fastq.shm.metrics import ChildMetrics
from fastq.worker.options import WorkerOptions
from fastq.worker.worker import Worker

log = logging.getLogger("fastq.master")

EXIT_CRASH = 1
EXIT_BOOT = 4  # a child could not start: respawning would only crash-loop
FORK_GATE_WAIT_S = 0.05  # how long a fork waits for a thread's I/O to end


@dataclass
class Child:
    pid: int
    kind: str  # "worker" or "reaper"
    slot: int = -1
    worker_id: str = ""
    started: float = field(default_factory=time.monotonic)
    term_sent_at: Optional[float] = None  # retiring: asked to stop
    killed: bool = False


class Children:
    """The master's children by pid (``in``, ``len`` and ``values()`` as a dict's),
    each in a heartbeat slot of its own out of ``slots``; signalling one that is
    already gone is no error."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._by_pid: dict[int, Child] = {}

    def __len__(self) -> int:
        return len(self._by_pid)

    def __contains__(self, pid: object) -> bool:
        return pid in self._by_pid

    def values(self) -> list[Child]:
        """A copy: the caller may retire, add or drop children as it goes."""
        return list(self._by_pid.values())

    def workers(self) -> list[Child]:
        return [c for c in self._by_pid.values() if c.kind == "worker"]

    def has_reaper(self) -> bool:
        return any(c.kind == "reaper" for c in self._by_pid.values())

    def free_slots(self) -> list[int]:
        used = {c.slot for c in self._by_pid.values()}
        return [i for i in range(self.slots) if i not in used]

    def worker_pids(self) -> dict[int, int]:
        """``{slot: pid}`` of the worker children (read by the metrics' thread)."""
        for _ in range(5):  # the loop's thread may change the dict meanwhile
            try:
                return {c.slot: c.pid for c in list(self._by_pid.values()) if c.kind == "worker"}
            except RuntimeError:
                continue
        return {}

    def kinds_and_slots(self) -> list[tuple[str, int, int]]:
        """``(kind, pid, slot)`` of each child (read by the registry's thread)."""
        for _ in range(5):  # the loop's thread may change the dict meanwhile
            try:
                return [(c.kind, c.pid, c.slot) for c in list(self._by_pid.values())]
            except RuntimeError:
                continue
        return []

    def signal(self, child: Child, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, sig)

    def retire(self, child: Child) -> None:
        """Ask it to stop (once): SIGTERM, its graceful stop."""
        if child.term_sent_at is None:
            child.term_sent_at = time.monotonic()
            self.signal(child, signal.SIGTERM)

    def signal_all(self, sig: int) -> None:
        for child in self.values():
            self.signal(child, sig)

    def fork(
        self,
        kind: str,
        main: Callable[[], NoReturn],
        *,
        gate: threading.Lock,
        master_signals: tuple[int, ...],
    ) -> Optional[Child]:
        """Fork a child that runs ``main`` (which never returns; see ``run_child``)
        and record it; None (try again later) while ``gate`` stays held."""
        # A child forked while another thread holds a process-wide lock would inherit
        # it held: the threads that do I/O hold the gate meanwhile. A moment's wait:
        # a call that Redis answers holds it a millisecond, and a fork put off to the
        # loop's next turn costs a second; one that Redis does not answer holds it
        # for its timeout, and the fork is tried again then.
        if not gate.acquire(timeout=FORK_GATE_WAIT_S):
            return None
        # Until the child has reset its handlers it would run the master's, which
        # only enqueue into its copy of the master's queue: a SIGTERM sent right
        # after the fork would be lost. Blocked, it waits for the child instead
        # (``run_child`` unblocks them).
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, master_signals)
        try:
            # what the master has buffered would be printed again by the child
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            pid = os.fork()
            if pid == 0:
                set_process_name(f"fastq-{kind}")
                main()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            gate.release()
        child = Child(pid, kind)
        self._by_pid[pid] = child
        return child

    def reap(self, block: bool = False) -> Iterator[tuple[Child, int]]:
        """Each child that exited, with its exit code (minus the signal's number if
        a signal ended it), one at a time; ``block``: wait for every one."""
        while self._by_pid:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self._by_pid.pop(pid, None)
            if child is not None:
                yield child, os.waitstatus_to_exitcode(status)


def set_process_name(name: str) -> None:
    """Name the process for ``ps -o comm`` and psutil's ``name()`` (Linux only;
    called while the process has one thread, whose name is the process's)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name[:15])


def run_child(
    main: Callable[[], None], master_signals: tuple[int, ...], drop_master_state: Callable[[], None]
) -> NoReturn:
    """In the child, right after ``Children.fork`` (with ``master_signals``
    blocked): take the default handlers back, drop what is the master's, run
    ``main``, and exit with a coded status."""
    code = 0
    try:
        # own process group: a terminal's Ctrl-C reaches only the master,
        # which stops the children in order
        os.setpgid(0, 0)
        for sig in master_signals:
            signal.signal(sig, signal.SIG_DFL)
        # a stop that came before the child booted ends it now: it holds no jobs
        signal.pthread_sigmask(signal.SIG_UNBLOCK, master_signals)
        drop_master_state()
        random.seed()
        print_whole_lines()  # children share the master's stdout
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_CRASH
    except BaseException:
        log.exception("child %d crashed", os.getpid())
        code = EXIT_CRASH
    finally:
        logging.shutdown()
        # os._exit skips the interpreter's flush: what jobs printed into a pipe's or a
        # file's buffer would be lost with it
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing to save
                stream.flush()
        os._exit(code)


def run_worker(
    app: App,
    queues: list[str],
    options: WorkerOptions,
    *,
    worker_id: str,
    slot: HeartbeatSlot,
    metrics: Optional[ChildMetrics],
    parent_pid: int,
    cpu_slots: Optional[CpuSlots],
    quiet: bool,
) -> None:
    """A worker child's ``main``: boot (a failure exits ``EXIT_BOOT``), then run."""
    if options.max_jobs:  # jitter, so that children do not all recycle at once
        jitter = random.randint(0, max(1, options.max_jobs // 10))
        options = dataclasses.replace(options, max_jobs=options.max_jobs + jitter)
    try:
        worker = Worker(
            app,
            queues,
            options,
            worker_id=worker_id,
            slot=slot,
            metrics=metrics,
            parent_pid=parent_pid,
            cpu_slots=cpu_slots,
        )
        worker.quiet = quiet
        worker.init_process()
    except Exception:
        log.exception("worker %s failed to boot", worker_id)
        raise SystemExit(EXIT_BOOT) from None
    worker.run_loop()
