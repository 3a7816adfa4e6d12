"""The pre-forking master of ``fastq pool -c N``.

A loop of verb-named phases, as gunicorn's arbiter: wait for signals → handle
them → reap dead children (handing their jobs back at once) → murder the stuck →
manage the count. Signal handlers only enqueue; all work happens in the loop.
Its children (fork, waitpid, a child's life after the fork) are :mod:`fastq.pool.children`.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import random
import select
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from types import FrameType
from typing import Callable, NoReturn, Optional

import psutil

from fastq.app import App
from fastq.connection.checks import check_redis
from fastq.monitor.losses import LossWatch, LossWatchThread, named
from fastq.pool.announce import pool_announcer
from fastq.pool.children import (
    EXIT_BOOT,
    Child,
    Children,
    run_child,
    run_worker,
    set_process_name,
)
from fastq.pool.handback import CALL_TIMEOUT_S, HandBack, HandBacks, death_cause
from fastq.pool.metrics import Exporter
from fastq.pool.ramp import RAMP_POLL_S, StartRamp, cpu_count
from fastq.pool.reload import watch_for_changes
from fastq.pool.takeover import (
    PoolFiles,
    TakeOver,
    default_state_dir,
    find_predecessors,
    pool_digest,
    process_started,
)
from fastq.protocol import scripts
from fastq.reaper.reaper import Reaper
from fastq.shm.cpuslots import CpuSlots
from fastq.shm.heartbeat import HeartbeatBoard
from fastq.shm.metrics import OTHER_JOB, STALLED, MetricsBoard
from fastq.worker.options import WorkerOptions

log = logging.getLogger("fastq.master")

KILL_GRACE_S = 3.0  # between the polite signal and SIGKILL
TIMEOUT_GRACE_S = 2.0  # a job's own SIGALRM gets this long before the child is killed
CRASH_WINDOW_S = 10.0
CRASHES_BEFORE_BACKOFF = 5
MEMORY_CHECK_S = 2.0

_HANDLED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGUSR1,
    signal.SIGCHLD,
)


@dataclass
class PoolConfig:
    children: int  # worker processes (``-c``)
    queues: list[str]
    worker: WorkerOptions = field(default_factory=WorkerOptions)  # each child's
    child_timeout_s: float = 30.0
    graceful_timeout_s: float = 30.0
    reaper: bool = True
    cpu_slots: int = 0  # children running CPU-bound batches at once; 0: no limit
    queues_from_app: bool = False  # no -q: serve the app's queues, read again at a HUP
    first_wave: int = 0  # workers forked first at start-up (fastq.pool.ramp); 0: one per CPU
    metrics_port: Optional[int] = None  # serve Prometheus metrics (fastq.shm.metrics) on it
    metrics_host: str = "127.0.0.1"
    reload_paths: list[str] = field(default_factory=list)  # --reload: a HUP when a .py changes
    # where the board's file lives, for a pool after this one (fastq.pool.takeover);
    # None: $FASTQ_STATE_DIR, /dev/shm or the temp dir
    state_dir: Optional[str] = None


class Master:
    """Supervises ``config.children`` worker children and a reaper child.

    Args:
        app: imported once here; children share it copy-on-write.
        reload_app: on SIGHUP, returns the app imported afresh (new code), or
            raises; None: SIGHUP restarts the children with the same code.
    """

    def __init__(
        self, app: App, config: PoolConfig, reload_app: Optional[Callable[[], App]] = None
    ) -> None:
        if config.children < 1:
            raise ValueError(f"children must be >= 1, not {config.children}")
        self.app = app
        self.config = config
        self.reload_app = reload_app
        self.num_workers = config.children
        self.pid = 0
        self.exit_code = 0
        self.stopping = False
        self.stop_deadline = 0.0
        self.hard_stopping = False
        self.hard_deadline = 0.0
        self.halted = False
        self.quiet = False
        self.spawned = 0
        self.spawn_after = 0.0
        self.crashes: deque[float] = deque(maxlen=CRASHES_BEFORE_BACKOFF)
        self.next_memory_check = 0.0
        self._signals: deque[int] = deque()
        self._pipe: tuple[int, int] = (-1, -1)
        # the slots of dead workers whose hand-back is not sent yet: not given to a
        # new child (its reset would wipe what a pool after this one reads there)
        self.unsent_slots: set[int] = set()
        self.hand_backs = HandBacks(app, config.queues, on_sent=self.hand_back_sent)
        self.board = HeartbeatBoard(
            max(2 * config.children + 2, config.children + 16),
            records=config.worker.async_jobs + config.worker.threads,
        )
        self.children = Children(self.board.slots)
        self.files: Optional[PoolFiles] = None  # the board's file, once run() made it
        self.cpu_slots = CpuSlots(config.cpu_slots) if config.cpu_slots > 0 else None
        self.metrics: Optional[MetricsBoard] = None
        self.exporter: Optional[Exporter] = None
        if config.metrics_port is not None:
            self.exporter = Exporter(
                app,
                self.board.slots,
                config.queues,
                self.children.worker_pids,
                config.metrics_port,
                config.metrics_host,
            )
            self.metrics = self.exporter.board
        self.ramp = StartRamp(min(config.children, config.first_wave or cpu_count()))

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until stopped; returns the exit status."""
        self.pid = os.getpid()
        set_process_name("fastq-master")
        check_redis(self.app, f"master {self.pid}")
        take_over = self.open_files()
        self.init_signals()
        log.info(
            "master %d: %d workers on %s%s",
            self.pid,
            self.num_workers,
            ",".join(self.config.queues),
            " and a reaper" if self.config.reaper else "",
        )
        scripts.preload(self.app.new_client, CALL_TIMEOUT_S, f"master {self.pid}")
        watch = watch_for_loss(
            lambda: self.app, lambda: self.config.queues, self.pid, self.hand_backs
        )
        self.hand_backs.start()
        if take_over is not None:
            take_over.start()
        announcer = pool_announcer(
            self.app,
            self.pid,
            self.board,
            self.children.kinds_and_slots,
            lambda: self.config.queues,
            lambda: self.num_workers,
            self.hand_backs,
        )
        reload_watch = watch_for_changes(self.config.reload_paths, self.pid, self.hand_backs)
        if self.exporter is not None:
            self.exporter.start()
            log.info("master %d: metrics on %s", self.pid, self.exporter.url)
        try:
            while True:
                if not self.stopping:
                    self.manage_children()
                # a starting pool looks at its first wave often: the rest may be wanted
                self.wait_for_signals(1.0 if self.ramp.done or self.stopping else RAMP_POLL_S)
                self.handle_signals()
                self.reap_children()
                if self.halted or (self.stopping and not self.children):
                    break
                self.murder_stuck()
                self.check_memory()
        finally:
            self.children.signal_all(signal.SIGKILL)
            self.reap_children(block=True)
            for fd in self._pipe:
                os.close(fd)
            if take_over is not None:
                take_over.stop()
            self.hand_backs.close()
            if self.files is not None:
                self.files.remove()
            announcer.stop()
            if reload_watch is not None:
                reload_watch.stop()
            watch.stop()
            if self.exporter is not None:
                self.exporter.stop()
        log.info("master %d: stopped", self.pid)
        return self.exit_code

    def open_files(self) -> Optional[TakeOver]:
        """The board in a file of the state directory, with its manifest, for a pool
        started after this one dies whole; returns the take-over of the pools of
        this Redis and namespace that died so on this host (None: none). Renames
        their files first: a predecessor of the same pid (a container's pid 1)
        names its files as this pool does."""
        state_dir = self.config.state_dir or default_state_dir()
        digest = pool_digest(self.app)
        try:
            predecessors = find_predecessors(state_dir, digest, self.pid)
            files = PoolFiles(
                state_dir,
                digest,
                self.pid,
                self.app.namespace,
                list(self.config.queues),
                self.board.slots,
                self.board.records,
                self.board.ring_size,
            )
            board = HeartbeatBoard(
                self.board.slots, self.board.records, self.board.ring_size, path=files.board_path
            )
            files.write()
        except OSError as exc:
            log.warning(
                "master %d: no board file in %s (%s): a pool started after this one dies "
                "whole waits for its leases to lapse",
                self.pid,
                state_dir,
                exc,
            )
            return None
        self.board.close()
        self.board, self.files = board, files
        if not predecessors:
            return None
        return TakeOver(predecessors, self.hand_backs.put, self.pid)

    def note_worker(self, slot: int, worker: tuple[str, int]) -> None:
        """The manifest says which worker (id, pid) holds ``slot`` now."""
        files = self.files
        if files is None:
            return
        files.workers[slot] = (*worker, process_started(worker[1]))
        files.queues = list(self.config.queues)
        try:
            files.write()
        except OSError as exc:
            log.warning("master %d: the board's manifest not written (%s)", self.pid, exc)

    # -- signals -------------------------------------------------------------------

    def init_signals(self) -> None:
        # the self-pipe turns a signal into a readable fd, so the loop's select()
        # wakes at once instead of at its timeout
        self._pipe = os.pipe()
        for fd in self._pipe:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
            fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.fcntl(fd, fcntl.F_GETFD) | fcntl.FD_CLOEXEC)
        for sig in _HANDLED:
            signal.signal(sig, self._enqueue_signal)

    def _enqueue_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """Only enqueues; the loop handles it."""
        if signum != signal.SIGCHLD and len(self._signals) < 10:
            self._signals.append(signum)
        try:
            os.write(self._pipe[1], b".")
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EINTR):
                raise

    def wait_for_signals(self, timeout_s: float) -> None:
        try:
            ready, _, _ = select.select([self._pipe[0]], [], [], timeout_s)
        except InterruptedError:
            return
        if ready:
            try:
                while os.read(self._pipe[0], 4096):
                    pass
            except BlockingIOError:
                pass

    def handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.popleft()
            name = signal.Signals(signum).name
            log.info("master %d: %s", self.pid, name)
            getattr(self, f"handle_{name[3:].lower()}")()

    def handle_term(self) -> None:
        if not self.stopping:
            self.stop_gracefully()
        else:
            self.stop_hard()

    handle_int = handle_term

    def handle_hup(self) -> None:
        """Rolling restart: new children (with reloaded code, and a reaper with its
        schedules) replace the old, which finish the job in hand and hand back what
        they prefetched."""
        if self.stopping:
            return
        if self.reload_app is not None:
            try:
                self.app = self.reload_app()
            except Exception as exc:
                log.error(
                    "master %d: reloading the app failed, keeping the old code: %s", self.pid, exc
                )
                return
            if self.config.queues_from_app:
                # new queues go last and none is dropped: a child's slot names the
                # queue of its job by index, and old children still run on the old list
                old = self.config.queues
                self.config.queues = old + [q for q in self.app.job_queues() if q not in old]
                self.hand_backs.queues = list(self.config.queues)
        # the reaper too: a new one fires the reloaded app's periodic jobs
        for child in self.children.values():
            self.children.retire(child)

    def handle_ttin(self) -> None:
        self.num_workers += 1

    def handle_ttou(self) -> None:
        self.num_workers = max(1, self.num_workers - 1)

    def handle_usr1(self) -> None:
        """Quiet: children stop claiming and stay up, for a deploy."""
        self.quiet = True
        for child in self.children.workers():
            self.children.signal(child, signal.SIGUSR1)

    def stop_gracefully(self) -> None:
        log.info(
            "master %d: stopping: each child finishes its job in hand (%gs at most); "
            "a second Ctrl-C or SIGTERM stops them at once",
            self.pid,
            self.config.graceful_timeout_s,
        )
        self.stopping = True
        self.stop_deadline = time.monotonic() + self.config.graceful_timeout_s
        for child in self.children.values():
            self.children.retire(child)

    def stop_hard(self) -> None:
        """A second signal, or the graceful timeout: children get their second
        SIGTERM (interrupt the job, hand everything back); SIGKILL after a grace."""
        if self.hard_stopping:
            return
        self.stopping = self.hard_stopping = True
        self.hard_deadline = time.monotonic() + KILL_GRACE_S
        for child in self.children.values():
            self.children.signal(child, signal.SIGTERM)

    # -- children ----------------------------------------------------------------------

    def workers(self) -> list[Child]:
        return self.children.workers()

    def manage_children(self) -> None:
        """Spawn up to the wanted count; retire the oldest beyond it. Workers come
        first: at start-up, the reaper has nothing urgent to do (it comes with the
        ramp's second wave)."""
        self.manage_workers()
        if (
            self.config.reaper
            and self.ramp.done
            and not self.children.has_reaper()
            and time.monotonic() >= self.spawn_after
        ):
            slot = self.free_slots()[-1]  # from the end: workers take them from the start
            self.board.slot(slot).reset()
            child = self.spawn(lambda: self.reaper_main(slot), "reaper")
            if child is not None:
                child.slot = slot

    def manage_workers(self) -> None:
        active = sorted(
            (c for c in self.children.workers() if c.term_sent_at is None), key=lambda c: c.started
        )
        for child in active[: max(0, len(active) - self.num_workers)]:
            self.children.retire(child)
        ramping = not self.ramp.done
        up = ((c.pid, self.board.slot(c.slot)) for c in active)
        missing = self.ramp.wanted(self.num_workers, up, time.monotonic()) - len(active)
        if ramping and self.ramp.done and active and missing > 0:  # the second wave
            log.info("master %d: forking %d more workers: %s", self.pid, missing, self.ramp.reason)
        if missing <= 0 or time.monotonic() < self.spawn_after:
            return
        free = self.free_slots()[:-1]  # the last one is kept for the reaper
        if len(free) < missing:
            log.warning(
                "master %d: no heartbeat slot free for %d more workers",
                self.pid,
                missing - len(free),
            )
        for slot in free[:missing]:
            if not self.spawn_worker(slot):
                return  # the next turn of the loop

    def hand_back_sent(self, hand_back: HandBack) -> None:
        """Redis took a dead worker's hand-back: its slot may go to a new child (called
        from the hand-back thread: one set operation)."""
        self.unsent_slots.discard(hand_back.slot_index)

    def free_slots(self) -> list[int]:
        """The slots no child holds, but those of dead workers whose hand-back is
        not sent yet."""
        unsent = set(self.unsent_slots)  # the hand-back thread may change it meanwhile
        return [slot for slot in self.children.free_slots() if slot not in unsent]

    def spawn_worker(self, slot: int) -> bool:
        self.spawned += 1
        worker_id = f"{socket.gethostname()}:{self.pid}:w{slot}.{self.spawned}"
        self.board.slot(slot).reset()
        child = self.spawn(lambda: self.worker_main(slot, worker_id), "worker")
        if child is None:
            return False
        child.slot, child.worker_id = slot, worker_id
        self.note_worker(slot, (worker_id, child.pid))
        return True

    def spawn(self, main: Callable[[], None], kind: str) -> Optional[Child]:
        """Fork a child running ``main``; None (try again at the next turn of the
        loop) while the hand-back thread is doing I/O (it holds the fork gate)."""
        child = self.children.fork(
            kind,
            lambda: self.child_main(main),
            gate=self.hand_backs.fork_gate,
            master_signals=_HANDLED,
        )
        if child is not None:
            log.info("master %d: spawned %s %d", self.pid, kind, child.pid)
        return child

    def child_main(self, main: Callable[[], None]) -> NoReturn:
        """In the child: drop the master's state, run, exit with a coded status."""

        def drop_master_state() -> None:
            for fd in self._pipe:
                os.close(fd)
            if self.exporter is not None:
                self.exporter.close_in_child()

        run_child(main, _HANDLED, drop_master_state)

    def worker_main(self, slot: int, worker_id: str) -> None:
        run_worker(
            self.app,
            self.config.queues,
            self.config.worker,
            worker_id=worker_id,
            slot=self.board.slot(slot),
            metrics=None if self.metrics is None else self.metrics.child(slot),
            parent_pid=self.pid,
            cpu_slots=self.cpu_slots,
            quiet=self.quiet,
        )

    def reaper_main(self, slot: int) -> None:
        Reaper(self.app, parent_pid=self.pid, slot=self.board.slot(slot)).run()

    def reap_children(self, block: bool = False) -> None:
        """Collect exited children; hand their leased jobs back at once."""
        for child, code in self.children.reap(block):
            self.on_child_exit(child, code)

    def on_child_exit(self, child: Child, code: int) -> None:
        how = f"exit status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
        expected = child.term_sent_at is not None or self.stopping
        if code == 0 or expected:
            log.info("master %d: %s %d exited (%s)", self.pid, child.kind, child.pid, how)
        else:
            log.error("master %d: %s %d died (%s)", self.pid, child.kind, child.pid, how)
        job_at_fault = False
        if child.kind == "worker":
            # an exit nobody asked for, status 0 included (os._exit(0) in a job)
            # its entry in the manifest stays until a new child takes its slot: were
            # the pool killed before this hand-back is sent, the next pool sends it
            # (again is harmless: only what the worker still holds moves)
            hand_back = self.release_jobs(child, code, crashed=code != 0 or not expected)
            job_at_fault = not expected and hand_back.job_at_fault
            if self.metrics is not None:  # before its slot is reused
                self.metrics.fold(child.slot)
        if code == EXIT_BOOT:
            log.error(
                "master %d: a worker could not boot; stopping instead of crash-looping", self.pid
            )
            self.halted, self.exit_code = True, EXIT_BOOT
        elif job_at_fault:  # the cause is known (a stall counted): no backoff for the others
            log.error("master %d: worker %d died running a job; replacing it", self.pid, child.pid)
        elif code != 0 and not expected:
            now = time.monotonic()
            self.crashes.append(now)
            if (
                len(self.crashes) == CRASHES_BEFORE_BACKOFF
                and now - self.crashes[0] < CRASH_WINDOW_S
            ):
                delay = min(10.0, 0.5 * 2 ** random.randint(0, 3))
                log.error("master %d: children crash-looping; respawning in %.1fs", self.pid, delay)
                self.spawn_after = now + delay

    def release_jobs(self, child: Child, code: int, crashed: bool) -> HandBack:
        """Hand a dead child's leases back to the front of their queues (queued:
        sent by the hand-back thread, never waited on here), each as its heartbeat
        slot says (:meth:`fastq.pool.handback.HandBack.of_dead_child`)."""
        hand_back = HandBack.of_dead_child(
            child.worker_id,
            self.board.slot(child.slot),
            crashed=crashed,
            hard_stop=self.hard_stopping,
            cause=death_cause(code),
            slot_index=child.slot,
        )
        running = hand_back.running
        if self.metrics is not None and running is not None and not self.hard_stopping:
            queues = self.config.queues
            queue = queues[running[0]] if running[0] < len(queues) else queues[0]
            self.metrics.add(queue, OTHER_JOB, STALLED)  # the master knows its id, not its job
        self.unsent_slots.add(child.slot)
        self.hand_backs.put(hand_back)
        return hand_back

    def murder_stuck(self) -> None:
        """Children that stopped heartbeating or ran a job past its timeout get a
        polite SIGTERM, then SIGKILL; so does everyone once a stop runs late."""
        now = time.monotonic()
        if self.stopping and not self.hard_stopping and now > self.stop_deadline:
            log.warning("master %d: graceful timeout expired", self.pid)
            self.stop_hard()
        if self.hard_stopping and now > self.hard_deadline:
            for child in self.children.values():
                if not child.killed:
                    child.killed = True
                    self.children.signal(child, signal.SIGKILL)
            return
        for child in self.children.values():
            if child.killed:
                continue
            slot = self.board.slot(child.slot)
            silent_s = now - slot.last_beat
            running = slot.running()
            overdue = running is not None and running[3] > 0 and now > running[3] + TIMEOUT_GRACE_S
            if overdue:
                log.error(
                    "master %d: %s %d ran a job past its timeout; killing it",
                    self.pid,
                    child.kind,
                    child.pid,
                )
            elif silent_s > self.config.child_timeout_s:
                if child.term_sent_at is None:
                    log.error(
                        "master %d: %s %d silent for %.0fs (slot %d, its last beat at "
                        "%.3f, now %.3f); stopping it",
                        self.pid,
                        child.kind,
                        child.pid,
                        silent_s,
                        child.slot,
                        slot.last_beat,
                        now,
                    )
                    self.children.retire(child)
                    continue
                if now - child.term_sent_at < KILL_GRACE_S:
                    continue
                log.error(
                    "master %d: %s %d still silent; killing it", self.pid, child.kind, child.pid
                )
            else:
                continue
            child.killed = True
            self.children.signal(child, signal.SIGKILL)

    def check_memory(self) -> None:
        limit = self.config.worker.max_memory_bytes
        now = time.monotonic()
        if limit is None or now < self.next_memory_check:
            return
        self.next_memory_check = now + MEMORY_CHECK_S
        for child in self.children.workers():
            try:
                rss = psutil.Process(child.pid).memory_info().rss
            except psutil.Error:
                continue
            if rss > limit and child.term_sent_at is None:
                log.warning(
                    "master %d: worker %d uses %d MiB, recycling it", self.pid, child.pid, rss >> 20
                )
                self.children.retire(child)


def watch_for_loss(
    app: Callable[[], App], queues: Callable[[], list[str]], pid: int, hand_backs: HandBacks
) -> LossWatchThread:
    """Start looking at the markers of the pool's queues (``queues()``, every shard
    of each; ``app()``: the app, which a HUP may reload), with the hand-backs'
    client settings and under their fork gate (a child forked while this thread
    logs would inherit the log's lock held). The first look is made before this
    returns, before any child is forked."""
    watch = LossWatch(app().namespace, f"master {pid}", log, lost_what=_pool_queues)
    thread = LossWatchThread(
        watch,
        hand_backs.connect,
        lambda client: app().physical_queues_on(client, queues()),
        hand_backs.fork_gate,
    )
    thread.start()
    return thread


def _pool_queues(lost: list[str]) -> str:
    return f"the jobs of this pool's queues {named(lost)} no longer exist"
