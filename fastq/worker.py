"""One worker process: claim a batch, run it, and settle it in the next round trip."""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
import traceback
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

import orjson
import redis

from fastq._accel import backoff, codec
from fastq.batch import Claim, Outcomes, RoundTrip
from fastq.errors import Fail, Retry
from fastq.keys import validate_queue_name

if TYPE_CHECKING:
    from fastq.app import App
    from fastq.job import JobDef

log = logging.getLogger("fastq.worker")

MAX_BATCH = 1000
_OUTCOME_TYPES = (Retry, Fail)
_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


class HardStop(BaseException):
    """Raised inside a running job by a second stop signal."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    """Runs jobs of ``queues`` (in priority order) from ``app``.

    The constructor touches no process state; ``run()`` opens the connection,
    so a Worker may be built before a fork and run after it.

    Args:
        batch_size: jobs claimed per round trip (1 to 1000).
        burst: return once every queue is empty and nothing is scheduled.
        lease_s: how long a claimed job stays leased before a reaper may hand it
            to another worker.
        idle_timeout_s: longest single wait for a wake-up when idle.
        handle_signals: install SIGTERM/SIGINT handlers (graceful, then hard stop).
    """

    def __init__(
        self,
        app: App,
        queues: list[str],
        *,
        batch_size: int = 100,
        burst: bool = False,
        lease_s: float = 60.0,
        idle_timeout_s: float = 5.0,
        worker_id: Optional[str] = None,
        handle_signals: bool = True,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        for q in queues:
            validate_queue_name(q)
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch size must be within 1..{MAX_BATCH}, not {batch_size}")
        self.app = app
        self.queues = list(dict.fromkeys(queues))
        self.batch_size = batch_size
        self.burst = burst
        self.lease_ms = int(lease_s * 1000)
        self.idle_timeout_s = idle_timeout_s
        self.worker_id = worker_id
        self.handle_signals = handle_signals
        self.stopping = False
        self.jobs_run = 0
        self._pending: dict[str, Outcomes] = {}
        self._rt: Optional[RoundTrip] = None
        self._registry: dict[str, JobDef[Any]] = {}
        self._redis_failures = 0
        self._waiting = False

    # -- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; finish the job in hand; hand back what was not started."""
        self.stopping = True

    def _handle_stop_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """First signal: graceful stop. Second: interrupt the running job."""
        if self.stopping or self._waiting:
            # a blocked BLPOP would otherwise sit out its whole timeout
            raise HardStop(signal.Signals(signum).name)
        log.info(
            "worker %s: %s received, stopping after the job in hand",
            self.worker_id,
            signal.Signals(signum).name,
        )
        self.stopping = True

    def _wait_for_work(self, timeout_s: float) -> None:
        assert self._rt is not None
        self._waiting = True
        try:
            self._rt.wait_for_work(timeout_s)
        except HardStop:
            self.stopping = True  # a stop signal while idle: nothing is running
            # the BLPOP reply may still come: never reuse that connection
            self._rt.client.connection_pool.disconnect()
        finally:
            self._waiting = False

    def init_process(self) -> None:
        """Per-process set-up, after any fork: own connection, signal handlers."""
        if self.worker_id is None:
            self.worker_id = default_worker_id()
        self._registry = dict(self.app.registry)
        client = self.app.new_client(retries=0, socket_timeout_s=self.idle_timeout_s + 30)
        self._rt = RoundTrip(
            client,
            self.worker_id,
            self.queues,
            self.app.namespace,
            lease_ms=self.lease_ms,
            dead_max_age_ms=self.app.dead_max_age_ms,
            dead_max_len=self.app.dead_max_len,
            max_stalls=self.app.max_stalls,
        )
        self._pending = {q: Outcomes() for q in self.queues}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle_stop_signal)
            signal.signal(signal.SIGINT, self._handle_stop_signal)

    def run(self) -> None:
        """Work until stopped (or, in burst mode, until the queues are empty)."""
        self.init_process()
        log.info(
            "worker %s: queues %s, batch %d", self.worker_id, ",".join(self.queues), self.batch_size
        )
        try:
            self._loop()
        finally:
            self._flush()
            assert self._rt is not None
            self._rt.client.close()
        log.info("worker %s: stopped after %d jobs", self.worker_id, self.jobs_run)

    # -- the loop --------------------------------------------------------------

    def _loop(self) -> None:
        rt = self._rt
        assert rt is not None
        queues = self.queues
        index = 0  # the queue to claim from; back to 0 after every batch (strict priority)
        empty_in_a_row = 0
        next_due_ms = -1
        release_all = False
        while not self.stopping:
            try:
                claim = rt.send(
                    self._pending, (queues[index], self.batch_size), release_all=release_all
                )
            except _REDIS_DOWN as exc:
                self._wait_for_redis(exc)
                release_all = True
                continue
            self._redis_failures = 0
            release_all = False
            self._pending = {q: Outcomes() for q in queues}
            assert claim is not None
            if len(claim):
                index, empty_in_a_row, next_due_ms = 0, 0, -1
                self._run_batch(claim)
                continue
            if claim.next_due_ms >= 0 and (next_due_ms < 0 or claim.next_due_ms < next_due_ms):
                next_due_ms = claim.next_due_ms
            empty_in_a_row += 1
            index = (index + 1) % len(queues)
            if empty_in_a_row < len(queues):
                continue
            # every queue came back empty: sleep until a wake-up or the next due job
            if self.burst and next_due_ms < 0:
                return
            wait_s = self.idle_timeout_s
            if next_due_ms >= 0:
                wait_s = min(wait_s, max(next_due_ms - claim.now_ms, 1) / 1000.0)
            try:
                self._wait_for_work(wait_s)
            except _REDIS_DOWN as exc:
                self._wait_for_redis(exc)
                release_all = True
            index, empty_in_a_row, next_due_ms = 0, 0, -1

    def _wait_for_redis(self, exc: Exception) -> None:
        self._redis_failures += 1
        delay = min(5.0, 0.1 * 2 ** min(self._redis_failures - 1, 6)) * (0.5 + random.random() / 2)
        log.warning(
            "worker %s: Redis unavailable (%s); retrying in %.2fs", self.worker_id, exc, delay
        )
        time.sleep(delay)

    def _flush(self) -> None:
        """Settle what is pending (acks, hand-backs) before exiting, retrying a
        few times if Redis is away; what still fails is left to lease expiry."""
        assert self._rt is not None
        for attempt in range(6):
            try:
                # release_all: a reply lost to a signal may have left leases unseen
                self._rt.send(self._pending, release_all=True)
                return
            except _REDIS_DOWN as exc:
                if attempt == 5:
                    log.error("worker %s: could not settle its last batch: %s", self.worker_id, exc)
                    return
                self._wait_for_redis(exc)

    # -- running a batch ---------------------------------------------------------

    def _run_batch(self, claim: Claim) -> None:
        runnable, broken = codec.decode_claim(claim.reply, 2, self._registry)
        out = self._pending[claim.queue]
        for job_id, reason in broken:
            log.error(
                "job %s of queue %s is broken, quarantined: %s",
                job_id.decode(),
                claim.queue,
                reason,
            )
        out.broken.extend(broken)
        done = out.done.append
        i = 0
        try:
            for i, (job_id, target, args, kwargs, attempts, env) in enumerate(runnable):  # noqa: B007
                if self.stopping:
                    out.unstarted.extend(job[0] for job in runnable[i:])
                    self.jobs_run += i
                    return
                try:
                    result = target.fn(*args, **kwargs)
                except Exception as exc:
                    self._settle_error(out, job_id, target, args, kwargs, attempts, env, exc)
                else:
                    if result is None or not isinstance(result, _OUTCOME_TYPES):
                        done(job_id)
                    else:
                        self._settle_error(out, job_id, target, args, kwargs, attempts, env, result)
        except BaseException:
            # interrupted mid-job (hard stop, SystemExit): hand it and the rest back
            out.stalled.append(runnable[i][0])
            out.unstarted.extend(job[0] for job in runnable[i + 1 :])
            self.jobs_run += i + 1
            raise
        self.jobs_run += len(runnable)

    def _settle_error(
        self,
        out: Outcomes,
        job_id: bytes,
        target: JobDef[Any],
        args: list[Any],
        kwargs: dict[str, Any],
        attempts: int,
        env: dict[str, Any],
        exc: BaseException,
    ) -> None:
        policy = target.policy
        retries = env.get("retries", policy.retries)
        if not isinstance(retries, int):
            retries = policy.retries
        name = target.name
        if isinstance(exc, Retry):
            if attempts <= retries:
                delay_ms = (
                    int(exc.delay_s * 1000)
                    if exc.delay_s is not None
                    else backoff.backoff_ms(
                        attempts,
                        policy.backoff_ms,
                        policy.max_backoff_ms,
                        policy.jitter,
                        random.random(),
                    )
                )
                env.update(attempts=attempts, error="Retry requested")
                out.retry.append((job_id, delay_ms, orjson.dumps(env)))
                return
            self._bury(
                out,
                job_id,
                env,
                attempts,
                f"Retry requested after {attempts} attempts: retries exhausted",
                None,
            )
            return
        out.failed += 1
        if isinstance(exc, Fail):
            log.warning("job %s %s failed for good: %s", name, job_id.decode(), exc.reason)
            self._bury(out, job_id, env, attempts, f"Fail: {exc.reason}", None)
            return
        if isinstance(exc, TypeError) and not target.arg_checker.binds(args, kwargs):
            reason = f"arguments do not fit {name}: {exc}"
            log.error("job %s %s is broken, quarantined: %s", name, job_id.decode(), reason)
            out.failed -= 1
            out.broken.append((job_id, reason))
            return
        error = f"{type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if isinstance(exc, policy.retry_on) and attempts <= retries:
            delay_ms = backoff.backoff_ms(
                attempts, policy.backoff_ms, policy.max_backoff_ms, policy.jitter, random.random()
            )
            log.warning(
                "job %s %s failed (attempt %d of %d), retrying in %.2fs: %s",
                name,
                job_id.decode(),
                attempts,
                retries + 1,
                delay_ms / 1000,
                error,
            )
            env.update(attempts=attempts, error=error, traceback=tb, failed_at=_now_ms())
            out.retry.append((job_id, delay_ms, orjson.dumps(env)))
            return
        log.error(
            "job %s %s failed after %d attempts, moved to dead: %s",
            name,
            job_id.decode(),
            attempts,
            error,
        )
        self._bury(out, job_id, env, attempts, error, tb)

    @staticmethod
    def _bury(
        out: Outcomes,
        job_id: bytes,
        env: dict[str, Any],
        attempts: int,
        error: str,
        tb: Optional[str],
    ) -> None:
        env.update(attempts=attempts, error=error, traceback=tb, failed_at=_now_ms())
        out.dead.append((job_id, orjson.dumps(env)))
