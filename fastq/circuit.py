"""Circuit breakers: jobs that share a resource that can go down (an SMTP server, an
API) stop starting while it is down, across every worker of every host, so that
no retry is spent and no job goes dead because of the outage.

``@app.job(circuit_key="smtp:{host}", circuit_failures=20, circuit_open_s=5.0)``:
the key is formatted from the job's arguments, as a ``rate_key``. After
``circuit_failures`` failures in a row of the key's jobs (an exception; not a
``Retry``, a ``Fail``, a result that cannot be kept, nor arguments that do not fit),
the circuit opens: for ``circuit_open_s`` no job of the key starts. A worker that
meets one reschedules it to when the circuit may close, with no attempt counted,
and remembers it until then (no round trip for the key's other jobs). Then one job
probes (half-open): a success closes the circuit, a failure opens it again for
twice as long (up to ten minutes). One log line when a circuit opens, one when it
closes, from the worker whose report made it so.

The state is one hash a key (``circuit_check.lua`` before a start,
``circuit_report.lua`` with the outcomes of a round trip's jobs, per key, in order).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from typing import Any, Callable, Optional

import redis

from fastq.connection.faults import REDIS_ERRORS
from fastq.keytemplate import KeyTemplate, bounded
from fastq.protocol import control
from fastq.protocol.contracts import CIRCUIT_CHECK, CIRCUIT_REPORT
from fastq.protocol.keys import NamespaceKeys
from fastq.validate import is_finite

log = logging.getLogger("fastq.worker")

DEFAULT_FAILURES = 20
DEFAULT_OPEN_S = 5.0
MAX_FAILURES = 1_000_000
MAX_OPEN_S = 86_400.0
# how long a probing job holds a half-open circuit when it has no timeout_s: if its
# worker dies, another job probes after this
DEFAULT_PROBE_S = 60.0
# a job that meets an open circuit comes back this much later than it may close, at
# most (a share of the pause): the key's jobs do not all come back at once
SPREAD = 0.2
# When Redis fails the check, the job is rescheduled this far ahead: never started
# past a circuit it could not read.
FAULT_DELAY_MS = 1000


class CircuitKey:
    """A job's circuit breaker: the key's template (as a ``rate_key``'s), the failures
    in a row that open it, and how long it stays open the first time.

    Raises:
        TypeError, ValueError: a bad template (as ``KeyTemplate`` says), or
            ``failures`` not an int within 1..1,000,000, ``open_s`` not a finite
            number of seconds within (0, 86400].
    """

    __slots__ = ("template", "failures", "open_ms", "_key")

    def __init__(
        self, fn: Callable[..., Any], template: object, failures: object, open_s: object
    ) -> None:
        self._key = KeyTemplate(fn, template, "circuit_key")
        self.template = self._key.template
        if isinstance(failures, bool) or not isinstance(failures, int):
            raise TypeError(f"circuit_failures must be an int, not {failures!r}")
        if not 1 <= failures <= MAX_FAILURES:
            raise ValueError(f"circuit_failures must be within 1..{MAX_FAILURES}, not {failures}")
        if isinstance(open_s, bool) or not isinstance(open_s, (int, float)):
            raise TypeError(f"circuit_open_s must be a number of seconds, not {open_s!r}")
        if not (is_finite(open_s) and 0 < open_s <= MAX_OPEN_S):
            raise ValueError(
                f"circuit_open_s must be a finite number of seconds in (0, {MAX_OPEN_S:g}], "
                f"not {open_s!r}"
            )
        self.failures = failures
        self.open_ms = max(1, int(open_s * 1000))

    def key_for(self, args: list[Any], kwargs: dict[str, Any]) -> Optional[str]:
        """The key of a job run with these arguments; None when they do not bind."""
        key = self._key.format(args, kwargs)
        return None if key is None else bounded(key)


class Circuits:
    """A worker's side of its jobs' circuit breakers, on its own client
    (``client()``: made at first use on a cluster, so it may raise): the check
    before a job of a key starts (:meth:`wait_ms`), and the report of the outcomes
    of its jobs (:meth:`report`), once per round trip."""

    def __init__(self, client: Callable[[], redis.Redis], namespace: str) -> None:
        self.client = client
        self.keys = NamespaceKeys(namespace)
        # key -> until when (time.monotonic()) this worker knows the circuit open
        self._open_until: dict[str, float] = {}

    def wait_ms(self, circuit: CircuitKey, key: str, probe_s: Optional[float]) -> int:
        """0: a job of ``key`` may start (the circuit is closed, or it probes the
        half-open circuit); else how long it waits (spread, so that the key's jobs
        do not all come back at once)."""
        now = time.monotonic()
        until = self._open_until.get(key)
        if until is not None:
            if now < until:
                return self._spread(int((until - now) * 1000), circuit)
            del self._open_until[key]
        probe_ms = int((probe_s if probe_s is not None else DEFAULT_PROBE_S) * 1000) + 1
        try:
            wait_ms = CIRCUIT_CHECK.call(
                self.client(),
                CIRCUIT_CHECK.keys_for(self.keys, key),
                CIRCUIT_CHECK.argv(probe_ms, circuit.open_ms),
            )
        except REDIS_ERRORS as exc:
            log.warning(
                "circuit %s: could not read it (%s); the job is rescheduled in %d ms",
                key,
                exc,
                FAULT_DELAY_MS,
            )
            return FAULT_DELAY_MS
        if wait_ms <= 0:
            return 0
        self._open_until[key] = now + wait_ms / 1000
        return self._spread(wait_ms, circuit)

    @staticmethod
    def _spread(wait_ms: int, circuit: CircuitKey) -> int:
        return wait_ms + int(random.random() * SPREAD * circuit.open_ms) + 1

    def report(self, outcomes: list[tuple[str, CircuitKey, bool]]) -> None:
        """Report what became of jobs of circuit keys (key, its circuit, succeeded),
        in order: one call a key. A Redis fault is logged: those outcomes count
        for nothing (the circuit learns from the next ones)."""
        by_key: dict[str, tuple[CircuitKey, list[str]]] = {}
        for key, circuit, ok in outcomes:
            by_key.setdefault(key, (circuit, []))[1].append("s" if ok else "f")
        for key, (circuit, seen) in by_key.items():
            try:
                transition, pause_ms = CIRCUIT_REPORT.call(
                    self.client(),
                    CIRCUIT_REPORT.keys_for(self.keys, key),
                    CIRCUIT_REPORT.argv(circuit.failures, circuit.open_ms, "".join(seen)),
                )
            except REDIS_ERRORS as exc:
                log.warning("circuit %s: could not report %d outcomes (%s)", key, len(seen), exc)
                continue
            if transition:
                with contextlib.suppress(*REDIS_ERRORS):  # the listing only
                    control.note_circuit(self.client(), self.keys, key, transition == "opened")
            if transition == "opened":
                self._open_until[key] = time.monotonic() + pause_ms / 1000
                log.warning(
                    "circuit %s opened: its jobs fail (%d in a row, or a probe); none "
                    "starts for %.1f s, then one probes",
                    key,
                    circuit.failures,
                    pause_ms / 1000,
                )
            elif transition == "closed":
                self._open_until.pop(key, None)
                log.warning("circuit %s closed: a probe succeeded; its jobs start again", key)
