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

import hashlib
import logging
from typing import Any, Callable, Optional

import redis

from fastq.connection.faults import REDIS_ERRORS
from fastq.keytemplate import KeyTemplate
from fastq.protocol.contracts import RATE_TAKE
from fastq.protocol.keys import QueueKeys
from fastq.validate import RateLimit

log = logging.getLogger("fastq.worker")

# A formatted key longer than this is replaced by its SHA-1 (arguments may be long).
MAX_KEY_CHARS = 200
# When Redis fails the take, the job is rescheduled this far ahead (its outcome
# goes out with the batch's, once Redis is back): never started without a token.
FAULT_DELAY_MS = 1000


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
        if key is not None and len(key) > MAX_KEY_CHARS:
            key = "sha1:" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()
        return key


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
        limit = rate_key.limit
        try:
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
