"""An app's Redis as its producer and its operator methods use it: the URL and the
namespace, one client per process (its scripts loaded), Redis errors raised as
producers raise them, the keys of a queue, and the queues' shard counts.

The App holds one :class:`Store` and hands it to its producer and its admin, so both
read the same client and see a ``configure`` at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

import redis
from redis import Redis

from fastq.connection import client as redis_client
from fastq.connection.client import check_url
from fastq.connection.cluster import is_cluster_url
from fastq.connection.faults import REDIS_ERRORS, for_producer
from fastq.connection.perprocess import PerProcess
from fastq.connection.url import mask_url
from fastq.errors import FastqError
from fastq.protocol import scripts
from fastq.protocol.keys import NamespaceKeys, QueueKeys
from fastq.protocol.shards import ShardCounts
from fastq.validate import check_namespace

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# How long a producer's or an operator's call waits for Redis (a stall: a big fork, a
# slow disk, a paused server) before it gives up, by default.
DEFAULT_CALL_TIMEOUT_S = 5.0


class Store:
    """One Redis and one namespace in it.

    Args:
        redis_url: where Redis is; without it ``$FASTQ_REDIS_URL``, else
            :data:`DEFAULT_REDIS_URL`.
        namespace: the prefix of every key.
        cluster: ``redis_url`` is one node of a Redis Cluster.
        call_timeout_s: how long a call of its client waits for a reply before it
            gives up (redis-py's ``TimeoutError``, raised as ``RedisUnavailable``).
            A timeout is not retried, so a stalled Redis costs a call this long once;
            a lost connection is, twice, at once.

    Raises:
        ValueError: an invalid URL or namespace.
    """

    def __init__(
        self,
        redis_url: Optional[str],
        namespace: str,
        cluster: bool,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        self.cluster_flag = bool(cluster)
        self.redis_url = check_url(
            redis_url or os.environ.get("FASTQ_REDIS_URL") or DEFAULT_REDIS_URL,
            cluster=self.cluster_flag,
        )
        self.namespace = check_namespace(namespace)
        self.call_timeout_s = call_timeout_s
        self.shard_counts = ShardCounts()  # sharded queues: declared by the app, or Redis'
        self._client: PerProcess[redis.Redis] = PerProcess()

    def configure(self, *, redis_url: Optional[str], namespace: Optional[str]) -> None:
        """Point elsewhere: what was read of the old Redis is forgotten."""
        if redis_url is not None:
            self.redis_url = check_url(redis_url, cluster=self.cluster_flag)
        if namespace is not None:
            self.namespace = check_namespace(namespace)
        self.shard_counts.forget()
        self.close()

    @property
    def cluster(self) -> bool:
        return self.cluster_flag or is_cluster_url(self.redis_url)

    def keys(self, queue: str) -> QueueKeys:
        return QueueKeys(self.namespace, queue)

    @property
    def namespace_keys(self) -> NamespaceKeys:
        return NamespaceKeys(self.namespace)

    def new_client(
        self,
        *,
        retries: int = 2,
        socket_timeout_s: Optional[float] = 30.0,
        connect_timeout_s: float = 5.0,
        retry_timeouts: bool = True,
    ) -> redis.Redis:
        return redis_client.new_client(
            self.redis_url,
            cluster=self.cluster_flag,
            retries=retries,
            socket_timeout_s=socket_timeout_s,
            connect_timeout_s=connect_timeout_s,
            retry_timeouts=retry_timeouts,
        )

    @property
    def where(self) -> str:
        """The Redis and namespace read, for a message (its password masked)."""
        return f"{mask_url(self.redis_url)}, namespace {self.namespace!r}"

    @property
    def redis(self) -> redis.Redis:
        """The process's client; a new one after fork, never a shared socket."""
        return self._client.get(self._made_client)

    def _made_client(self) -> Redis:
        with self.producer_call():
            timeout_s = self.call_timeout_s
            client = self.new_client(  # a cluster's connects here
                socket_timeout_s=timeout_s,
                connect_timeout_s=min(timeout_s, 5.0),
                retry_timeouts=False,
            )
            scripts.load_all(client)
        return client

    @contextmanager
    def producer_call(self) -> Iterator[None]:
        """Redis errors raised inside, as producers raise them: ``RedisUnavailable``,
        ``RedisRefused`` (out of memory, NOPERM, WRONGPASS, busy), or the error
        itself when it is no fault of Redis."""
        try:
            yield
        except FastqError:
            raise
        except REDIS_ERRORS as exc:
            raise for_producer(exc, self.redis_url) from exc

    def close(self) -> None:
        client = self._client.take()
        if client is not None:
            client.close()
