"""From a Redis URL to a client: every client of every fastq process is made here.

``redis://``, ``rediss://`` and ``unix://`` URLs go through redis-py's ``from_url``.
``redis+sentinel://`` and ``rediss+sentinel://`` (TLS) go through redis-py's Sentinel
support: each connection asks the sentinels where the master is when it connects, so
a process whose connection a failover cut reconnects to the new master, and a
connection that meets ``READONLY`` (its master demoted under it) is dropped and
reported as a lost connection, which fastq's fault classes treat as an outage::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db][?options]

The user and password are the master's; the sentinels' own are the query options
``sentinel_username`` and ``sentinel_password``. A host without a port is at 26379,
Sentinel's default. The other options are those of a ``redis://`` URL
(``socket_timeout``, ``ssl_ca_certs``...), for the master; ``rediss+sentinel://``
connects to the sentinels with TLS as well, with the same ``ssl_*`` options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis import exceptions as rex
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry as RedisRetry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection

from fastq._version import __version__
from fastq.connection.cluster import is_cluster_url, new_cluster_client, parse_cluster_url
from fastq.connection.typed import unchecked
from fastq.connection.url import mask_url

# looked up, not imported: redis-py 7.0 (the newest for Python 3.9) has none, and
# mypy refuses an import of a name that one version lacks
DriverInfo: Any = getattr(redis, "DriverInfo", None)
if DriverInfo is None:  # redis-py 7.0 and older: it reads its version once, at import
    CLIENT_OPTIONS: dict[str, Any] = {}
else:
    # The library name and version sent at connect (CLIENT SETINFO), given once:
    # otherwise redis-py reads its package metadata for every new connection,
    # ~3 ms of CPU, paid by every child a pool forks.
    CLIENT_OPTIONS = {
        "driver_info": DriverInfo(lib_version=redis.__version__).add_upstream_driver(
            "fastq", __version__
        )
    }

# scheme -> does it speak TLS
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
DEFAULT_SENTINEL_PORT = 26379
# query options for the sentinels themselves, not passed to the master
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")


@dataclass(frozen=True)
class SentinelURL:
    """A sentinel URL, parsed: where the sentinels are, which master to ask them for,
    and the options of the connections to it (as redis-py's ``parse_url`` gives them)."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    tls: bool = False
    master_options: dict[str, Any] = field(default_factory=dict)
    sentinel_options: dict[str, Any] = field(default_factory=dict)


def is_sentinel_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES and "://" in url


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse ``redis+sentinel://...`` (see the module's docstring).

    Raises:
        ValueError: not a sentinel URL, no host, a bad port, no service name, a
            db that is not a number, or an option redis-py refuses. The message
            never quotes the user part (it may hold the password).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a sentinel URL: it must start with {' or '.join(SENTINEL_SCHEMES)}")
    tls = SENTINEL_SCHEMES[scheme.lower()]
    parts = urlsplit("redis://" + rest)  # urlsplit knows nothing of '+' schemes' netlocs
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    sentinels = tuple(_host_port(entry) for entry in hostinfo.split(",")) if hostinfo else ()
    if not sentinels:
        raise ValueError("no sentinel host: give host:port[,host:port...] after the '//'")
    segments = parts.path.split("/")[1:]
    if segments and not segments[-1]:
        segments.pop()  # a trailing slash
    if not segments or not segments[0]:
        raise ValueError("no service name: the master's name goes in the path (/mymaster/0)")
    if len(segments) > 2:
        raise ValueError(f"the path is /service_name[/db], not {parts.path!r}")
    service_name = unquote(segments[0])
    db = segments[1] if len(segments) == 2 else None
    if db is not None and not db.isdigit():
        raise ValueError(f"the db must be a number, not {db!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    sentinel_options = {
        name.removeprefix("sentinel_"): value for name, value in query if name in _SENTINEL_OPTIONS
    }
    master_query = [(name, value) for name, value in query if name not in _SENTINEL_OPTIONS]
    # the master's options as redis-py reads a plain URL's: the same names, parsers and errors
    plain = f"{'rediss' if tls else 'redis'}://{userinfo}{at}sentinel/{db or ''}" + (
        f"?{urlencode(master_query)}" if master_query else ""
    )
    master_options: dict[str, Any] = parse_url(plain)  # type: ignore[no-untyped-call]
    for name in ("host", "port", "connection_class"):
        master_options.pop(name, None)
    return SentinelURL(sentinels, service_name, tls, master_options, sentinel_options)


def _host_port(entry: str) -> tuple[str, int]:
    if entry.startswith("["):  # [::1]:26379
        host, bracket, port = entry[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise ValueError(f"bad sentinel address {entry!r}")
        port = port[1:]
    else:
        host, _, port = entry.partition(":")
    if not host:
        raise ValueError(f"a sentinel address without a host: {entry!r}")
    if not port:
        return host, DEFAULT_SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port in sentinel address {entry!r}")
    return host, int(port)


def sentinels_refusal(url: str, timeout_s: float) -> Optional[BaseException]:
    """Why the sentinels of ``url`` refuse fastq, when every one that answers refuses
    its credentials (``sentinel_username`` / ``sentinel_password``); None otherwise.

    redis-py's master lookup takes a refused login for a sentinel that is down and
    reports "no master found", which a worker would retry forever."""
    parsed = parse_sentinel_url(url)
    options = {k: v for k, v in parsed.sentinel_options.items() if k in ("username", "password")}
    refusal: Optional[BaseException] = None
    for host, port in parsed.sentinels:
        client = redis.Redis(
            host,
            port,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            ssl=parsed.tls,
            **options,
        )
        try:
            client.ping()
            return None  # one sentinel takes the credentials: not a refusal
        except (rex.AuthenticationError, rex.NoPermissionError) as exc:
            refusal = exc
        except rex.ResponseError as exc:  # NOAUTH, WRONGPASS as a plain reply
            if str(exc).split(maxsplit=1)[:1] not in (["NOAUTH"], ["WRONGPASS"]):
                return None
            refusal = exc
        except (rex.ConnectionError, rex.TimeoutError, OSError):
            continue  # down: says nothing about the credentials
        finally:
            client.close()
    return refusal


def check_url(url: str, *, cluster: bool = False) -> str:
    """``url``, if redis-py (or the sentinel or cluster parser) accepts it;
    ``cluster``: a plain URL names one node of a cluster.

    Raises:
        ValueError: one line naming the URL, its password masked.
    """
    if cluster or is_cluster_url(url):
        parse_cluster_url(url)  # its own ValueError, the password masked
        return url
    try:
        if is_sentinel_url(url):
            parse_sentinel_url(url)
        else:
            redis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise ValueError(f"invalid Redis URL {mask_url(url)!r}: {exc}") from None
    return url


class SentinelMasterConnection(SentinelManagedConnection):
    """A connection to the master that asks the sentinels where it is at every
    connect, also at the reconnects inside a command's own retries: redis-py (7+)
    makes those through ``connect_check_health``, which skips the sentinels and
    goes back to the last address, the demoted or dead master."""

    _asking = False  # in a connect that has asked the sentinels already

    def _connect_retry(self) -> None:
        self._asking = True
        try:
            super()._connect_retry()  # type: ignore[no-untyped-call]
        finally:
            self._asking = False

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if self._sock is None and not self._asking:
            self.connect()  # type: ignore[no-untyped-call]
            return
        super().connect_check_health(*args, **kwargs)


class SentinelMasterSSLConnection(SentinelMasterConnection, SSLConnection):
    pass


class Sentinels(Sentinel):
    """redis-py's ``Sentinel``, whose "no master found" names each sentinel that
    failed by its address rather than by its client's repr, which redis-py 7 (the
    newest for Python 3.9) writes with the sentinels' password in it."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            # untyped in redis-py 7
            found = unchecked(super()).discover_master(service_name)
            return cast("tuple[str, int]", found)
        except MasterNotFoundError as exc:
            text = str(exc)
            for sentinel in self.sentinels:
                where = sentinel.connection_pool.connection_kwargs
                text = text.replace(str(sentinel), f"sentinel {where['host']}:{where['port']}")
            raise MasterNotFoundError(text) from None


class SentinelMasterClient(redis.Redis):
    """The master's client of a sentinel URL; closing it closes its sentinels'
    connections too (every client has sentinel connections of its own)."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            manager: Optional[Sentinel] = getattr(self.connection_pool, "sentinel_manager", None)
            for sentinel in manager.sentinels if manager is not None else ():
                sentinel.close()


def new_client(
    url: str,
    *,
    cluster: bool = False,
    retries: int = 2,
    socket_timeout_s: Optional[float] = 30.0,
    connect_timeout_s: float = 5.0,
    retry_timeouts: bool = True,
) -> redis.Redis:
    """A fresh client of the Redis (or the Sentinel-managed master, or the cluster)
    at ``url``; ``cluster``: a plain URL names one node of a cluster. ``retries``:
    calls sent again after a lost connection (and, with ``retry_timeouts``, after a
    timeout: without it a call waits ``socket_timeout_s`` once, not once per retry).

    Options given in the URL win over these, as with redis-py's ``from_url``.
    """
    if not retries:
        retry = RedisRetry(NoBackoff(), 0)
    elif retry_timeouts:
        retry = RedisRetry(ExponentialBackoff(cap=0.5, base=0.05), retries)
    else:
        retry = RedisRetry(
            ExponentialBackoff(cap=0.5, base=0.05), retries, supported_errors=(rex.ConnectionError,)
        )
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        "retry": retry,
        **CLIENT_OPTIONS,
    }
    if cluster or is_cluster_url(url):
        options.pop("retry")
        nodes = new_cluster_client(parse_cluster_url(url), retry=retry, **options)
        # the same commands as a Redis: typed as one (what tells them apart is
        # fastq.connection.cluster.is_cluster)
        return cast(redis.Redis, nodes)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **options)
    parsed = parse_sentinel_url(url)
    options.update(parsed.master_options)
    connect_s = options["socket_connect_timeout"]
    sentinel_options: dict[str, Any] = {
        # a sentinel answers at once: the master's long read timeout (a worker waits
        # for a reply as long as a lease lasts) would only delay finding the master
        "socket_connect_timeout": connect_s,
        "socket_timeout": connect_s,
        # tried once each: a connect that finds no master is retried with the
        # master's retry policy (or fastq's backoff), around the whole discovery
        "retry": RedisRetry(NoBackoff(), 0),
        **CLIENT_OPTIONS,
        **parsed.sentinel_options,
    }
    options["connection_class"] = SentinelMasterConnection
    if parsed.tls:
        options["connection_class"] = SentinelMasterSSLConnection
        sentinel_options["ssl"] = True
        sentinel_options.update((k, v) for k, v in options.items() if k.startswith("ssl_"))
    # Sentinel's __init__ and master_for are untyped in redis-py 7
    sentinel = unchecked(Sentinels)(parsed.sentinels, sentinel_kwargs=sentinel_options)
    client: redis.Redis = sentinel.master_for(
        parsed.service_name, redis_class=SentinelMasterClient, **options
    )
    return client
