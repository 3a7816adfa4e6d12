"""Per-key rate limits: jobs that share a resource (an SMTP account, an API token)
start at most ``rate`` per ``per_s`` per key, across every worker of every host.

``@app.job(rate_key="smtp:{account}", rate=5, per_s=1)``: the key is formatted from
the job's arguments (bound to its signature, defaults applied) when a worker is
about to start it. The worker then reserves the key's next token (``rate_take.lua``,
one round trip, only for jobs with a ``rate_key``). A token due now: the job runs.
A token due later: the job is rescheduled to that time (the ack's retry section:
back to the front of the queue when due, no attempt counted; it shows in the
queue's ``retried`` count) with ``rate_slot`` in its envelope, and when it comes
back it starts without taking another. Each job waits once, in its own slot,
however many share the key; the child is never blocked meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import redis

from fastq.connection.faults import REDIS_ERRORS
from fastq.keytemplate import MAX_KEY_CHARS, KeyTemplate, bounded
from fastq.protocol import control
from fastq.protocol.contracts import RATE_REST, RATE_TAKE
from fastq.protocol.keys import NamespaceKeys, QueueKeys
from fastq.validate import RateLimit

log = logging.getLogger("fastq.worker")

# When Redis fails the take, the job is rescheduled this far ahead (its outcome
# goes out with the batch's, once Redis is back): never started without a token.
FAULT_DELAY_MS = 1000
# A worker reads the table of per-key overrides (app.set_key_rate_limit) at most
# this often: a change reaches every worker within it.
KEY_RATES_REFRESH_S = 1.0


def check_rate_key(key: object) -> str:
    """``key`` if it may be a formatted ``rate_key``: a str of 1 to
    :data:`MAX_KEY_CHARS` characters, none of them a control character.

    Raises:
        TypeError: not a str.
        ValueError: empty, too long, or holding a control character.
    """
    if not isinstance(key, str):
        raise TypeError(f"a rate key must be a str, not {key!r}")
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise ValueError(f"a rate key must be 1 to {MAX_KEY_CHARS} characters, not {len(key)}")
    if not key.isprintable():
        raise ValueError(f"a rate key must be printable (no control character): {key!r}")
    return key


class RateKey:
    """A job's per-key limit: the key's template (checked against the function's
    parameters at registration: :class:`fastq.keytemplate.KeyTemplate`), and the
    limit.

    Raises:
        TypeError, ValueError: as ``KeyTemplate`` says.
    """

    __slots__ = ("template", "limit", "_key")

    def __init__(self, fn: Callable[..., Any], template: object, limit: RateLimit) -> None:
        self._key = KeyTemplate(fn, template, "rate_key")
        self.template = self._key.template
        self.limit = limit

    def key_for(self, args: list[Any], kwargs: dict[str, Any]) -> Optional[str]:
        """The key of a job run with these arguments; None when they do not bind (the
        run then fails as broken, with no token taken)."""
        key = self._key.format(args, kwargs)
        return None if key is None else bounded(key)


class KeyGate:
    """Reserves tokens of per-key limits for a worker, on its own client
    (``client()``: made at first use on a cluster, so it may raise).

    ``home(queue, key)``: the queue whose keys hold ``key``'s state for jobs of
    ``queue``; for a shard, the key's shard of its queue (one state per key,
    whatever shard its jobs are in). Default: ``queue``."""

    def __init__(
        self,
        client: Callable[[], redis.Redis],
        namespace: str,
        home: Optional[Callable[[str, str], str]] = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.home = home
        self._keys: dict[str, QueueKeys] = {}
        self._overrides: dict[str, RateLimit] = {}  # app.set_key_rate_limit's table
        self._overrides_due = 0.0  # when to read it again (time.monotonic())

    def wait_ms(
        self, queue: str, rate_key: RateKey, args: list[Any], kwargs: dict[str, Any]
    ) -> int:
        """0: the job may start now; else how long until its reserved token is due."""
        key = rate_key.key_for(args, kwargs)
        if key is None:
            return 0
        if self.home is not None:
            queue = self.home(queue, key)
        k = self._keys.get(queue)
        if k is None:
            k = self._keys[queue] = QueueKeys(self.namespace, queue)
        try:
            limit = self._overrides_now().get(key, rate_key.limit)
            return RATE_TAKE.call(
                self.client(),
                RATE_TAKE.keys_for(k, key),
                RATE_TAKE.argv(limit.rate, limit.period_ms, limit.burst),
            )
        except REDIS_ERRORS as exc:
            log.warning(
                "rate key %s of queue %s: no token (%s); the job is rescheduled in %d ms",
                key,
                queue,
                exc,
                FAULT_DELAY_MS,
            )
            return FAULT_DELAY_MS

    def rest(self, queue: str, rests: list[tuple[str, RateLimit, int]]) -> None:
        """Rest keys that jobs of ``queue`` asked to slow down (``Retry(slow_key=True)``:
        key, the job's own limit, rest_ms): no token of the key is due before the
        rest ends, whatever the key's burst. A Redis fault is logged: the key goes
        on at its rate (the jobs themselves wait their delay_s)."""
        for key, default, rest_ms in rests:
            home = self.home(queue, key) if self.home is not None else queue
            k = self._keys.get(home)
            if k is None:
                k = self._keys[home] = QueueKeys(self.namespace, home)
            try:
                limit = self._overrides_now().get(key, default)
                # with burst B, tokens come B - 1 intervals before the state's time
                span_ms = rest_ms + (limit.burst - 1) * limit.period_ms // limit.rate
                if RATE_REST.call(
                    self.client(), RATE_REST.keys_for(k, key), RATE_REST.argv(span_ms)
                ):
                    log.warning(
                        "rate key %s rests %.1f s: a job asked to slow down (Retry(slow_key=True))",
                        key,
                        rest_ms / 1000,
                    )
            except REDIS_ERRORS as exc:
                log.warning("rate key %s: could not rest it (%s)", key, exc)

    def _overrides_now(self) -> dict[str, RateLimit]:
        """The table of per-key overrides, read again once :data:`KEY_RATES_REFRESH_S`
        has passed since it was last read."""
        now = time.monotonic()
        if now >= self._overrides_due:
            self._overrides_due = now + KEY_RATES_REFRESH_S
            self._overrides = control.key_rate_limits(self.client(), NamespaceKeys(self.namespace))
        return self._overrides
