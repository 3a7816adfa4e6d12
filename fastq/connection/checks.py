"""What a worker or a pool checks of its Redis before it starts.

A wrong password stops the start at once, with one line (retrying cannot fix it).
A Redis set up so that it can lose jobs is named, one warning per setting: it
still starts (the operator may know better), as Sidekiq and BullMQ do.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Protocol

from redis import exceptions as rex

from fastq.connection import cluster
from fastq.connection.client import is_sentinel_url, sentinels_refusal
from fastq.connection.faults import REDIS_ERRORS, Fault, classify
from fastq.connection.url import mask_url
from fastq.errors import RedisRefused

log = logging.getLogger("fastq.redis")

# The scripts start with ``#!lua flags=...`` (script flags: acks must run when Redis
# is full) and the claim waits with LMPOP: both came with Redis 7.0.
MIN_VERSION = (7, 0)
MIN_VERSION_WHY = "fastq's scripts use script flags (#!lua) and LMPOP, new in Redis 7.0"
CHECK_TIMEOUT_S = 5.0


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


class NamespaceKeys(Protocol):
    """What the checks read of a namespace's keys (``fastq.protocol.keys`` names
    them, a layer above)."""

    @property
    def queues(self) -> str:
        """The set of the queues the namespace knows."""
        ...


class Store(Protocol):
    """What the checks read of an app's store (``fastq.protocol.store``)."""

    @property
    def namespace_keys(self) -> NamespaceKeys: ...


class Checked(Protocol):
    """What the checks read of an app (``fastq.App`` is one; it lives a layer above)."""

    @property
    def redis_url(self) -> str: ...

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Mapping[str, Any]:
        """Job name -> its definition (with a ``queue``)."""
        ...

    def new_client(
        self, *, retries: int, socket_timeout_s: Optional[float], connect_timeout_s: float
    ) -> Any: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_redis(app: Checked, who: str) -> None:
    """Connect to ``app``'s Redis (every master of a cluster) and warn, one line
    each, about what can lose jobs; record the queues the app registers jobs on (see
    ``App.declare_queue``).

    Redis unreachable: logged once; the caller's own retries take over.

    Raises:
        fastq.RedisRefused: Redis refused the password or the user (``WRONGPASS``,
            ``NOAUTH``): the process must not start and retry forever.
    """
    url = mask_url(app.redis_url)
    client = None
    try:
        # a cluster's client connects as it is made, to read the slot map
        client = app.new_client(
            retries=0, socket_timeout_s=CHECK_TIMEOUT_S, connect_timeout_s=CHECK_TIMEOUT_S
        )
        nodes = _nodes(url, client)
        infos = [(where, node, node.info("server")) for where, node in nodes]
    except REDIS_ERRORS as exc:
        fault = classify(exc)
        if fault is not None and fault.operator_must_act:
            raise RedisRefused(fault.value, _refusal(url, exc)) from None
        if is_sentinel_url(app.redis_url):
            refusal = sentinels_refusal(app.redis_url, CHECK_TIMEOUT_S)
            if refusal is not None:
                raise RedisRefused(
                    Fault.DENIED.value,
                    f"the sentinels of {url} refused the connection ({refusal}): check "
                    "sentinel_username and sentinel_password in the URL",
                ) from None
        log.warning("%s: cannot check Redis at %s now (%s); will retry", who, url, exc)
        if client is not None:
            client.close()
        return
    try:
        for where, node, info in infos:
            _check_version(who, where, _text(info.get("redis_version", "")))
            _check_config(who, where, node)
        _announce_queues(who, app, client)
    finally:
        client.close()


def _refusal(url: str, exc: BaseException) -> str:
    """One line saying why Redis refused the connection, and what to check."""
    text = str(exc)
    if text.startswith("DENIED"):
        # protected mode answers a paragraph: its first sentence, and the remedies
        return (
            f"Redis at {url} refused the connection: {text.split('. ', 1)[0]}; set a "
            "password (requirepass, and put it in the URL) or, on a network that only "
            "trusted hosts reach, protected-mode no"
        )
    if classify(exc) is Fault.NO_DATABASE:
        return f"Redis at {url} has no such database ({text}): check the /db at the end of the URL"
    return f"Redis at {url} refused the connection ({text}): check the user and password in the URL"


def _nodes(url: str, client: Any) -> list[tuple[str, Any]]:
    """What to check, and how to name it: the Redis, or each master of a cluster."""
    if not cluster.is_cluster(client):
        return [(url, client)]
    return [
        (f"{url} (master {node.name})", client.get_redis_connection(node))
        for node in client.get_primaries()  # type: ignore[no-untyped-call]
    ]


def _announce_queues(who: str, app: Checked, client: Any) -> None:
    """Add the queues the app registers jobs on to the namespace's known queues, so
    that producers that register no jobs (enqueue by name) may enqueue there."""
    queues = [job.queue for job in app.registry.values()]
    if not queues:
        return
    try:
        client.sadd(app.store.namespace_keys.queues, *queues)
    except REDIS_ERRORS as exc:  # the first enqueue on each adds it as well
        log.warning("%s: cannot record the app's queues in Redis now (%s)", who, exc)


def _check_version(who: str, url: str, version: str) -> None:
    if version and _version(version) < MIN_VERSION:
        log.warning(
            "%s: Redis at %s is %s, older than %s: %s",
            who,
            url,
            version,
            ".".join(map(str, MIN_VERSION)),
            MIN_VERSION_WHY,
        )


def _check_config(who: str, url: str, client: Any) -> None:
    try:
        config = client.config_get("maxmemory-policy")
        config.update(client.config_get("appendonly"))
        config.update(client.config_get("save"))
    except (rex.ResponseError, rex.NoPermissionError) as exc:
        # managed Redis (ElastiCache, Memorystore...) or an ACL user may refuse CONFIG
        log.info("%s: could not check Redis' eviction and persistence settings: %s", who, exc)
        return
    policy: Optional[str] = config.get("maxmemory-policy")
    if policy is not None and policy != "noeviction":
        log.warning(
            "%s: Redis at %s has maxmemory-policy %s: when it fills up it evicts keys, "
            "jobs included; set it to noeviction",
            who,
            url,
            policy,
        )
    if config.get("appendonly") == "no" and not (config.get("save") or "").strip():
        log.warning(
            "%s: Redis at %s persists nothing (no AOF, no RDB save points): a restart "
            "loses every job; turn on appendonly",
            who,
            url,
        )
