"""Redis Cluster: its URLs, its client, and where a key's commands go.

``redis+cluster://[[user]:password@]host:port[,host:port...][/?options]`` (or
``rediss+cluster://`` for TLS) names a cluster by some of its nodes; so does a plain
``redis://`` URL of one node with ``App(url, cluster=True)``. The client is redis-py's
``RedisCluster``, which finds every other node, follows MOVED and ASK, and refreshes
its slot map.

Every key of a queue carries the hash tag ``{queue}``, so a script's KEYS share one
slot and each script call goes to one node. What spans queues (the namespace's set
of queues, a wait over several queues) is one command per queue here.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Sequence, TypeVar
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from fastq.connection.faults import REDIS_ERRORS
from fastq.connection.typed import unchecked
from fastq.connection.url import mask_url

if TYPE_CHECKING:
    from typing import TypeGuard  # Python 3.10

SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
DEFAULT_PORT = 6379
# Transactions (MULTI/EXEC on one slot) in a cluster pipeline: pause, resume and
# rate limits write with one
MIN_REDIS_PY = (6, 1)
# Tries of the first command a new client sends (each on another master)
CONSTRUCTION_RETRIES = 3
# host:port, host alone, or [IPv6]:port
_NODE = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\[\]:/?#@,\s]+))(?::(?P<port>\d+))?$"
)


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a cluster by its scheme (``redis+cluster://``)."""
    return url.partition("://")[0].lower() in SCHEMES


@dataclass(frozen=True)
class ClusterTarget:
    """Where a cluster is: some of its nodes, and the options every connection takes
    (``username``, ``password``, TLS, timeouts given in the URL's query)."""

    nodes: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict)


def _refuse(url: str, why: str) -> ValueError:
    return ValueError(f"invalid Redis Cluster URL {mask_url(url)!r}: {why}")


def parse_cluster_url(url: str) -> ClusterTarget:
    """The nodes and connection options of a cluster URL: ``redis+cluster://`` with one
    node or more, or a plain ``redis://``/``rediss://`` URL of one node.

    Raises:
        ValueError: not such a URL, a bad node or port, a database other than 0 (a
            cluster has only db 0), a unix socket, or a query option redis-py
            refuses; the message shows the URL with its password masked.
    """
    if not isinstance(url, str):
        raise TypeError(f"a Redis URL must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or (scheme not in SCHEMES and scheme not in SCHEMES.values()):
        raise _refuse(
            url,
            "a cluster URL starts with redis+cluster://, rediss+cluster:// (or, with "
            "cluster=True, redis:// or rediss://)",
        )
    rest, _, _ = rest.partition("#")
    rest, qmark, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not hosts:
        raise _refuse(url, "no host:port given")
    nodes = []
    for part in hosts.split(","):
        found = _NODE.match(part.strip())
        if found is None:
            raise _refuse(url, f"{part!r} is not host:port")
        port = int(found["port"]) if found["port"] else DEFAULT_PORT
        if not 0 < port < 65536:
            raise _refuse(url, f"port {port} out of range")
        nodes.append((found["v6"] or found["host"], port))
    if scheme in SCHEMES.values() and len(nodes) > 1:
        raise _refuse(url, "several nodes need a redis+cluster:// URL")
    # The options as redis-py reads them from a URL of the first node: the same
    # rules for the user, the password (percent-decoded), TLS and the query
    plain = f"{SCHEMES.get(scheme, scheme)}://{userinfo}{at}{quote(nodes[0][0])}:{nodes[0][1]}"
    plain += f"{slash}{path}{qmark}{query}"
    try:
        options = redis.connection.parse_url(plain)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise _refuse(url, str(exc)) from None
    if options.pop("db", 0) != 0:
        raise _refuse(url, "a cluster has only database 0")
    options.pop("host", None)
    options.pop("port", None)
    return ClusterTarget(tuple(nodes), options)


def check_redis_py() -> None:
    """Raise a clear error when the installed redis-py is too old for a cluster."""
    version = tuple(int(p) for p in re.findall(r"\d+", redis.__version__)[:2])
    if version < MIN_REDIS_PY:
        raise RuntimeError(
            f"Redis Cluster needs redis-py >= {'.'.join(map(str, MIN_REDIS_PY))} "
            f"(installed: {redis.__version__}): pip install -U redis"
        )


def new_cluster_client(target: ClusterTarget, *, retry: Any, **options: Any) -> RedisCluster:
    """A ``RedisCluster`` client of ``target``; ``retry`` is its own retry policy
    (MOVED, ASK, TRYAGAIN, CLUSTERDOWN and lost connections, the slot map refreshed
    between tries), ``options`` go to every node's connections. It is made while a
    master does not answer, as long as another one does."""
    check_redis_py()
    try:
        client = RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes],  # type: ignore[no-untyped-call]
            # As it is made, the client asks one master (its first) for COMMAND: with
            # no retry, a master that does not answer would stop every client of the
            # cluster from being made. Retried on another master, then ``retry`` on.
            retry=Retry(NoBackoff(), CONSTRUCTION_RETRIES),
            **{**target.options, **options},
        )
    except RedisClusterException as exc:
        # Unlike a Redis client, this one connects as it is made (to learn the slot
        # map). Raised as what went wrong, so that it is classified as any other
        # fault: a refused password, or the cluster unreachable (or not whole).
        if isinstance(exc.__cause__, redis.RedisError):
            raise exc.__cause__ from exc
        raise redis.ConnectionError(str(exc)) from exc
    client.set_retry(retry)
    return client


# -- routing -----------------------------------------------------------------------


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    return isinstance(client, RedisCluster)


def primaries(client: RedisCluster) -> list[redis.Redis]:
    """A plain client of each master (pooled by the cluster client): for what every
    master must get, such as the scripts."""
    return [client.get_redis_connection(node) for node in client.get_primaries()]  # type: ignore[no-untyped-call]


def node_of(client: RedisCluster, key: Any) -> ClusterNode:
    """The master that serves ``key``'s slot, from the client's slot map."""
    node: ClusterNode = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    return node


T = TypeVar("T")


def by_node(
    client: redis.Redis,
    items: Iterable[T],
    key_of: Callable[[T], Any],
    last: Collection[str] = (),
) -> list[tuple[str, list[T]]]:
    """``items`` grouped by the master serving ``key_of(item)``'s slot, by its name
    (``host:port``), the nodes named in ``last`` (those that did not answer last
    time) after the others; on a single Redis, all in one group named ``""``. An
    item whose slot has no master (yet) is a group of its own, named after its key:
    its own call says what is wrong."""
    if not is_cluster(client):
        return [("", list(items))]
    groups: dict[str, list[T]] = {}
    for item in items:
        key = key_of(item)
        try:
            node = node_of(client, key).name
        except REDIS_ERRORS:
            node = f"{{{key}}}"
        groups.setdefault(node, []).append(item)
    return sorted(groups.items(), key=lambda group: group[0] in last)


class SilentNodes:
    """The nodes that did not answer at all (stopped, gone), and when each is
    called again: shared by what calls them in turn (the reaper's firing and its
    sweep), so that a silent node costs the others one call timeout per try, and
    is tried no more often than every ``retry_s``."""

    def __init__(self, retry_s: float) -> None:
        self.retry_s = retry_s
        self._retry_at: dict[str, float] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._retry_at

    def wait_s(self, name: str) -> float:
        """How long node ``name`` is left alone yet (0: call it)."""
        return max(self._retry_at.get(name, 0.0) - time.monotonic(), 0.0)

    def failed(self, name: str, delay_s: float) -> float:
        """Node ``name`` did not answer; returns how long it is left alone: its
        backoff ``delay_s``, at least ``retry_s``."""
        delay_s = max(delay_s, self.retry_s)
        self._retry_at[name] = time.monotonic() + delay_s
        return delay_s

    def answered(self, name: str) -> None:
        self._retry_at.pop(name, None)


def masters_of(client: RedisCluster, keys: Sequence[Any]) -> list[redis.Redis]:
    """A plain client of each master serving one of ``keys``, each master once."""
    nodes = {node.name: node for node in (node_of(client, key) for key in keys)}
    return [client.get_redis_connection(node) for node in nodes.values()]


def node_client(client: RedisCluster, key: Any) -> redis.Redis:
    """A plain client of the master serving ``key``'s slot: its pipelines use one
    connection, in order, and follow no redirection."""
    node: redis.Redis = client.get_redis_connection(node_of(client, key))
    return node


def refresh_slots(client: RedisCluster) -> None:
    """Read the slot map again (after a MOVED or a lost node, outside the cluster
    client's own retries); a cluster that cannot be reached keeps the old one."""
    with contextlib.suppress(RedisClusterException, redis.RedisError):
        unchecked(client.nodes_manager).initialize()  # untyped in redis-py 7.0
