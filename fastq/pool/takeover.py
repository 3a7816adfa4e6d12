"""A pool that starts where its predecessor died takes over what it held, at once.

A pool's master keeps its heartbeat board (:class:`fastq.shm.heartbeat.HeartbeatBoard`:
each child's running job, the jobs it holds in flight, and its ring of jobs finished
whose ack was not answered yet) in a file of the pool's state directory (``/dev/shm``
by default: memory, not disk), beside a small manifest: the namespace, the queues,
and which worker id and process each slot belongs to. A pool that stops removes
both.

When the whole pool dies at once (the OOM killer, a container's kill, SIGKILL to
the process group), its children cannot hand anything back, and its master is not
there to do it for them: their leases would lapse only after ``lease_ms`` (60 s),
and the jobs they finished but had not acknowledged would run again then. A pool
that starts later on the same host, for the same Redis and namespace, finds the
files of a predecessor whose master is gone (its pid dead, or another process's
now) and does for each of its children what a master does for a child that died
(:class:`fastq.pool.handback.HandBack`): it acknowledges the finished jobs,
returns the running job counted a stall, and puts the rest back at the front of
their queues. A child of the predecessor that outlived its master finishes on its
own first (it stops once its parent is gone): it is waited for.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import orjson
import psutil

from fastq.pool.handback import HandBack
from fastq.shm.heartbeat import HeartbeatBoard

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.master")

MANIFEST_VERSION = 1
# how long a predecessor's children that outlived their master are waited for
# before their slots are handed back anyway (each stops on its own once its master
# is gone: it finishes its job in hand, acknowledges, and hands back the rest)
ORPHANS_PATIENCE_S = 60.0
POLL_S = 0.2


def default_state_dir() -> str:
    """``$FASTQ_STATE_DIR``, else ``/dev/shm`` where there is one, else the temp dir."""
    given = os.environ.get("FASTQ_STATE_DIR")
    if given:
        return given
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def pool_digest(app: App) -> str:
    """What names the pools of one Redis and namespace in the state directory."""
    return hashlib.sha256(f"{app.redis_url}\0{app.namespace}".encode()).hexdigest()[:16]


def process_started(pid: int) -> Optional[float]:
    """When process ``pid`` started (None: there is none, or a zombie: it is dead)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def remove_files(*paths: str) -> None:
    """Unlink ``paths``, those already gone (another pool's doing) included."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def is_alive(pid: int, started: Optional[float]) -> bool:
    """Is process ``pid`` the one that started at ``started`` (not a reused pid)?
    With ``started`` unknown, any process of that pid is taken for it."""
    now = process_started(pid)
    return now is not None and (started is None or abs(now - started) < 1.0)


@dataclass
class PoolFiles:
    """A running pool's board file and manifest; the master rewrites the manifest
    when it forks a worker or one exits (rarely: not on the jobs' path)."""

    state_dir: str
    digest: str
    pid: int
    namespace: str
    queues: list[str]
    slots: int
    records: int
    ring_size: int
    # slot -> (worker id, pid, when the process started)
    workers: dict[int, tuple[str, int, Optional[float]]] = field(default_factory=dict)

    @property
    def stem(self) -> str:
        return str(Path(self.state_dir) / f"fastq-pool-{self.digest}-{self.pid}")

    @property
    def board_path(self) -> str:
        return self.stem + ".board"

    @property
    def manifest_path(self) -> str:
        return self.stem + ".json"

    def write(self) -> None:
        """The manifest as it stands, replaced whole (a reader never sees half)."""
        manifest: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "namespace": self.namespace,
            "master_pid": self.pid,
            "master_started": process_started(self.pid),
            "queues": self.queues,
            "slots": self.slots,
            "records": self.records,
            "ring_size": self.ring_size,
            "workers": {str(s): list(w) for s, w in self.workers.items()},
        }
        tmp = f"{self.manifest_path}.tmp"
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(manifest))
        os.replace(tmp, self.manifest_path)

    def remove(self) -> None:
        remove_files(self.manifest_path, self.board_path)


@dataclass(frozen=True)
class Predecessor:
    """A dead pool's files, claimed by this pool (renamed, so that two pools that
    start at once do not both take it over)."""

    manifest: dict[str, Any]
    manifest_path: str
    board_path: str

    @property
    def master_pid(self) -> int:
        return int(self.manifest["master_pid"])

    def orphans(self) -> list[int]:
        """Its children that still run (they outlived their master)."""
        workers = self.manifest["workers"].values()
        return [pid for _, pid, started in workers if is_alive(pid, started)]

    def hand_backs(self) -> list[HandBack]:
        """What each of its workers held, as a master hands back a dead child's."""
        m = self.manifest
        board = HeartbeatBoard.open(self.board_path, m["slots"], m["records"], m["ring_size"])
        try:
            return [
                HandBack.of_dead_child(
                    worker_id,
                    board.slot(int(slot)),
                    crashed=True,
                    hard_stop=False,
                    cause=f"was killed with its pool (master {self.master_pid})",
                    queues=tuple(m["queues"]),
                )
                for slot, (worker_id, _, _) in sorted(m["workers"].items())
            ]
        finally:
            board.close()

    def remove(self) -> None:
        remove_files(self.manifest_path, self.board_path)


def find_predecessors(state_dir: str, digest: str, own_pid: int) -> list[Predecessor]:
    """The files of this Redis and namespace's pools whose master is gone, each
    claimed for this pool (one that another pool claimed first is left to it)."""
    found = []
    for manifest_path in sorted(Path(state_dir).glob(f"fastq-pool-{digest}-*.json")):
        try:
            manifest = orjson.loads(manifest_path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue  # being written (a rename is atomic: not ours), or not ours
        if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
            continue
        stem = str(manifest_path)[: -len(".json")]
        base, _, taker = stem.partition(".taken-by-")
        if taker and process_started(int(taker)) is not None:
            continue  # being taken over by a pool that runs
        if is_alive(manifest.get("master_pid", 0), manifest.get("master_started")):
            continue  # a pool that runs
        claimed = f"{base}.taken-by-{own_pid}"
        try:
            os.rename(manifest_path, claimed + ".json")
        except FileNotFoundError:
            continue  # another pool took it first
        board = stem + ".board"
        with contextlib.suppress(FileNotFoundError):
            os.rename(board, claimed + ".board")
        found.append(Predecessor(manifest, claimed + ".json", claimed + ".board"))
    return found


class TakeOver(threading.Thread):
    """Hands back, through ``put`` (the master's hand-back thread), what each of
    ``predecessors`` held, once its children that outlived it are gone."""

    def __init__(
        self,
        predecessors: list[Predecessor],
        put: Callable[[HandBack], None],
        own_pid: int,
        patience_s: float = ORPHANS_PATIENCE_S,
    ) -> None:
        super().__init__(name="fastq-takeover", daemon=True)
        self.predecessors = predecessors
        self.put = put
        self.own_pid = own_pid
        self.patience_s = patience_s
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        for predecessor in self.predecessors:
            deadline = time.monotonic() + self.patience_s
            while predecessor.orphans() and time.monotonic() < deadline:
                if self._stop_event.wait(POLL_S):
                    return
            try:
                hand_backs = predecessor.hand_backs()
            except (OSError, ValueError) as exc:
                log.warning(
                    "master %d: the board of pool %d could not be read (%s); its jobs come "
                    "back when their leases expire",
                    self.own_pid,
                    predecessor.master_pid,
                    exc,
                )
                predecessor.remove()
                continue
            for hand_back in hand_backs:
                self.put(hand_back)
            log.warning(
                "master %d: pool %d died with %d workers; handing back what they held",
                self.own_pid,
                predecessor.master_pid,
                len(hand_backs),
            )
            predecessor.remove()
