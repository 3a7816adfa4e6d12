"""The master's hand-backs: a dead child's leased jobs returned to the front of
their queues, sent from a thread of their own so that the master's supervision
loop never waits on Redis.

The loop only queues what it learnt (which worker died, which job it was running
and why it died); this thread sends the release calls and retries until Redis
takes them, logging an outage once. It does its I/O (Redis, logging) only while
holding ``fork_gate``, which the master takes before each fork: a child forked
while another thread holds a process-wide lock (stderr's buffer, the resolver's)
would inherit it held, and hang on its first log line. Anything still unsent when the master stops
comes back when the leases expire: a reaper takes them then.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import redis

from fastq.connection.faults import REDIS_ERRORS, Outage
from fastq.protocol import scripts
from fastq.protocol.contracts import ACK, RELEASE, ReleaseMode
from fastq.protocol.introspect import held_by
from fastq.protocol.keys import shard_names
from fastq.shm.heartbeat import HeartbeatSlot

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.master")

# the master's Redis calls time out quickly: a stalled Redis is retried, not waited on
CALL_TIMEOUT_S = 2.0


def death_cause(code: int) -> str:
    """How a child died, from its exit code (``-N``: killed by signal N), as a
    poison job's reason says it: "its worker <cause> while running it"."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code} (sys.exit() or os._exit() in the job?)"


@dataclass(frozen=True)
class HandBack:
    """What the master knows of a child that exited.

    ``running``: the queue index and id of the job it was running, if any (None
    as the id: too long to note). ``running_mode``: how that job goes back:
    STALLED (the child died or hung running it) or INTERRUPTED (the operator
    hard-stopped the pool). ``held``: the queue index and id of each job it held
    in flight (a child with ``--async-jobs``), going back as ``running`` does.
    ``rest_mode``: how its other leases go back: ORPHANED (it crashed) or UNSTARTED.
    ``finished``: the queue index and id of each job it finished whose ack it had
    not seen answered: acknowledged (done) before anything goes back, so that
    none of them runs again. ``cause``: how it died (``"was killed by SIGSEGV"``),
    said in the reason of a job it buries as poison.
    """

    worker_id: str
    running: Optional[tuple[int, Optional[bytes]]]
    running_mode: ReleaseMode
    rest_mode: ReleaseMode
    held: tuple[tuple[int, bytes], ...] = ()
    finished: tuple[tuple[int, bytes], ...] = ()
    cause: str = ""
    # the queues its indexes name, when not the master's own (a dead predecessor's)
    queues: tuple[str, ...] = ()
    slot_index: int = -1  # the heartbeat slot it was read from (-1: none of this master's)

    @property
    def job_at_fault(self) -> bool:
        """Was a job running when the child died (the likely cause of its death)?"""
        return self.running_mode is ReleaseMode.STALLED and bool(self.running or self.held)

    @classmethod
    def of_dead_child(
        cls,
        worker_id: str,
        slot: HeartbeatSlot,
        *,
        crashed: bool,
        hard_stop: bool,
        cause: str = "",
        queues: tuple[str, ...] = (),
        slot_index: int = -1,
    ) -> HandBack:
        """What a dead child's heartbeat slot says goes back, and how. The job it
        was running counts a stall (poison jobs go dead), unless the operator
        hard-stopped the pool (``hard_stop``): then it was interrupted, not at fault;
        so do the jobs it held in flight (threads, an event loop), unless one job
        alone is known for the culprit: the one that blocked its event loop (blamed
        in its record), else a sync job running in its worker's thread (the others
        it held go back with the rest, no stall counted). The others are orphaned
        if it ``crashed``, else unstarted."""
        running = slot.running()
        held = slot.held()
        if slot.loop_blamed():
            running = None  # the loop's blocker alone; a sync job beside it goes back as held
        elif running is not None:
            held = []
        return cls(
            worker_id=worker_id,
            running=None if running is None else (running[0], running[1]),
            running_mode=ReleaseMode.INTERRUPTED if hard_stop else ReleaseMode.STALLED,
            rest_mode=ReleaseMode.ORPHANED if crashed else ReleaseMode.UNSTARTED,
            held=tuple(held),
            finished=tuple(slot.finished_unacked()),
            cause=cause,
            queues=queues,
            slot_index=slot_index,
        )


class HandBacks(threading.Thread):
    """Sends queued hand-backs of ``queues`` in order, retrying each until Redis
    takes it; ``close()`` gives the unsent ones ``patience_s`` more."""

    def __init__(
        self,
        app: App,
        queues: list[str],
        connect: Optional[Callable[[], redis.Redis]] = None,
        on_sent: Optional[Callable[[HandBack], None]] = None,
    ) -> None:
        super().__init__(name="fastq-handbacks", daemon=True)
        self.app = app
        self.queues = list(queues)
        self.on_sent = on_sent  # told each hand-back Redis took (from this thread)
        self.connect = connect or (
            lambda: app.new_client(
                retries=0, socket_timeout_s=CALL_TIMEOUT_S, connect_timeout_s=CALL_TIMEOUT_S
            )
        )
        self.outage = Outage("master (hand-backs)", log)
        self._todo: queue.Queue[Optional[HandBack]] = queue.Queue()
        self._client: Optional[redis.Redis] = None
        self._closing = threading.Event()
        self._deadline = float("inf")
        self.fork_gate = threading.Lock()

    def put(self, hand_back: HandBack) -> None:
        """Only enqueues: called from the supervision loop."""
        self._todo.put(hand_back)

    def close(self, patience_s: float = 1.5) -> None:
        """Stop after sending what is queued, trying for ``patience_s`` at most
        (a quarter of it while Redis is known to be away: a stop must be prompt)."""
        if self.outage.ongoing:
            patience_s /= 4
        self._deadline = time.monotonic() + patience_s
        self._closing.set()
        self._todo.put(None)
        self.join(patience_s + CALL_TIMEOUT_S)

    def run(self) -> None:
        try:
            while True:
                item = self._todo.get()
                if item is None:
                    return
                while not self._send(item):
                    if time.monotonic() >= self._deadline:
                        self._give_up(item)
                        return
                if self.on_sent is not None:
                    self.on_sent(item)
        finally:
            if self._client is not None:
                with self.fork_gate:
                    self._client.close()

    def _give_up(self, item: HandBack) -> None:
        left = [item]
        while not self._todo.empty():
            more = self._todo.get_nowait()
            if more is not None:
                left.append(more)
        with self.fork_gate:
            log.warning(
                "master: Redis unavailable; the jobs of %s come back when their leases expire",
                ", ".join(h.worker_id for h in left),
            )

    def _send(self, item: HandBack) -> bool:
        """Send one hand-back; False if it must be tried again (after a backoff)."""
        with self.fork_gate:
            delay = self._try(item)
        if delay is None:
            return True
        if self._closing.is_set():  # stopping: a last few tries, close together
            time.sleep(min(delay, 0.2))
        else:
            self._closing.wait(delay)
        return False

    def _try(self, item: HandBack) -> Optional[float]:
        """One try; None when done, else how long to back off."""
        try:
            if self._client is None:
                self._client = self.connect()
            self.release(self._client, item)
        except REDIS_ERRORS as exc:
            try:
                return self.outage.failed(exc)
            except REDIS_ERRORS:  # a bug: never let it take the master down
                log.exception("master: could not hand back the jobs of %s", item.worker_id)
                return None
        self.outage.recovered()
        return None

    def release(self, client: redis.Redis, item: HandBack) -> None:
        """The ack of its finished jobs, then the release calls of one hand-back
        (each is idempotent: only jobs the worker still holds move, so a resend
        after a lost reply moves nothing)."""
        wid, max_stalls = item.worker_id, self.app.max_stalls
        queues = list(item.queues or self.queues)
        # Redis' counts: a mismatch with the app's stopped its workers at boot already
        counts = self.app.shard_counts.resolve(client, self.app.namespace, queues, strict=False)
        if item.finished:
            self.ack_finished(client, item, counts)
        for index, queue_name in enumerate(queues):
            running = item.running
            # an id the slot could not hold is not guessed at: no innocent job counts a stall
            ran = [job_id for i, job_id in item.held if i == index]
            if running is not None and running[0] == index and running[1] is not None:
                ran.append(running[1])
            # the slot names a queue, not its shard: each shard moves only ids it holds
            for name in shard_names(queue_name, counts.get(queue_name, 1)):
                keys = RELEASE.keys_for(self.app.keys(name), wid)
                if ran:
                    argv = RELEASE.argv(wid, item.running_mode, max_stalls, item.cause, ids=ran)
                    RELEASE.call(client, keys, argv).log_buried(log, name)
                argv = RELEASE.argv(wid, item.rest_mode, max_stalls)
                moved = RELEASE.call(client, keys, argv).moved
                if moved:
                    log.warning(
                        "master: %d jobs of %s handed back to %s", moved, item.worker_id, name
                    )

    def ack_finished(self, client: redis.Redis, item: HandBack, counts: dict[str, int]) -> None:
        """Acknowledge, as done, the jobs a dead child finished whose ack it had not
        seen answered: those it still holds (an ack that did go through left none),
        on the shard holding each (the slot names a queue, not its shard)."""
        app = self.app
        for index, queue_name in enumerate(item.queues or self.queues):
            ids = [job_id for i, job_id in item.finished if i == index]
            if not ids:
                continue
            acked = 0
            for name in shard_names(queue_name, counts.get(queue_name, 1)):
                keys = app.keys(name)
                held = held_by(client, keys, item.worker_id, ids)
                if held:
                    argv = ACK.argv(
                        app.dead_max_age_ms, app.dead_max_len, 0, item.worker_id, done=held
                    )
                    command = ACK.command(ACK.keys_for(keys, item.worker_id), argv)
                    raw = scripts.call_many(client, [command])[0]
                    acked += ACK.parse(raw)
                    app.after_ack(client, name, raw, "master")
            if acked:
                log.info(
                    "master: acknowledged %d jobs that %s finished on %s",
                    acked,
                    item.worker_id,
                    queue_name,
                )
