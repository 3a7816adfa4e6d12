"""The one place a Redis URL's password is hidden, and the CLI's TLS files."""

from __future__ import annotations

import re

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

import fastq
from fastq.connection.client import SentinelMasterClient, parse_sentinel_url
from fastq.connection.faults import Fault, classify
from fastq.connection.url import mask_url, with_tls_files


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
        ("redis://bob:p%40ss@h/1", "redis://bob:***@h/1"),
        ("redis://bob@h/1", "redis://bob@h/1"),  # a user alone is no secret
        (
            "rediss://h:1/0?ssl_ca_certs=/a/ca.pem&password=s3cret",
            "rediss://h:1/0?ssl_ca_certs=/a/ca.pem&password=***",
        ),
        ("unix:///tmp/r.sock?password=s3cret&db=2", "unix:///tmp/r.sock?password=***&db=2"),
        ("unix://bob:s3cret@/tmp/r.sock", "unix://bob:***@/tmp/r.sock"),
        ("rediss://h?ssl_password=s3cret", "rediss://h?ssl_password=***"),
    ],
)
def test_mask_url_hides_every_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_an_unparsable_url_shows_nothing_but_its_scheme() -> None:
    assert mask_url("redis://:s3cret@[::1") == "redis://***"
    assert mask_url("redis+sentinel://:s3cret@[::1,h/m") == "redis+sentinel://***"
    assert mask_url("s3cret") == "s3cret"  # no URL at all: no password part either


def test_with_tls_files() -> None:
    url = "rediss://:pw@h:6380/0"
    assert with_tls_files(url, ca_cert=None, cert=None, key=None) == url
    assert (
        with_tls_files(url, ca_cert="/c/ca.pem", cert="/c/me.pem", key="/c/me.key")
        == url + "?ssl_ca_certs=/c/ca.pem&ssl_certfile=/c/me.pem&ssl_keyfile=/c/me.key"
    )
    assert with_tls_files(url + "?db=1", ca_cert="/ca", cert=None, key=None).endswith(
        "?db=1&ssl_ca_certs=/ca"
    )
    with pytest.raises(ValueError, match=r"need a rediss:// URL, not 'redis://:\*\*\*@h/0'"):
        with_tls_files("redis://:pw@h/0", ca_cert="/ca", cert=None, key=None)


@pytest.mark.parametrize(
    "url", ["redis://:s3cret@host:notaport/0", "ftp://:s3cret@h/0", "redis://:s3cret@h/0?db=x"]
)
def test_an_invalid_url_is_refused_with_its_password_masked(url: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid Redis URL '\w+://:\*\*\*@h") as info:
        fastq.App(url)
    assert "s3cret" not in str(info.value)


# -- sentinel URLs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "redis+sentinel://:s3cret@s1:26379,s2:26379/mymaster/0",
            "redis+sentinel://:***@s1:26379,s2:26379/mymaster/0",
        ),
        (
            "rediss+sentinel://bob:s3cret@s1,[::1]:26380/m?sentinel_password=s3cret&socket_timeout=2",
            "rediss+sentinel://bob:***@s1,[::1]:26380/m?sentinel_password=***&socket_timeout=2",
        ),
        (
            "redis+sentinel://s1:26379/m/1?password=s3cret",
            "redis+sentinel://s1:26379/m/1?password=***",
        ),
    ],
)
def test_mask_url_hides_a_sentinel_urls_passwords(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_a_sentinel_url_parsed() -> None:
    parsed = parse_sentinel_url(
        "redis+sentinel://bob:p%40ss@s1:26379,s2,[::1]:26380/my%20master/3"
        "?sentinel_password=sp&sentinel_username=sam&socket_timeout=2.5&health_check_interval=10"
    )
    assert parsed.sentinels == (("s1", 26379), ("s2", 26379), ("::1", 26380))
    assert parsed.service_name == "my master"
    assert parsed.tls is False
    assert parsed.master_options == {
        "username": "bob",
        "password": "p@ss",
        "db": 3,
        "socket_timeout": 2.5,
        "health_check_interval": 10,
    }
    assert parsed.sentinel_options == {"password": "sp", "username": "sam"}
    bare = parse_sentinel_url("redis+sentinel://s1/m")
    assert (bare.sentinels, bare.service_name, bare.master_options) == ((("s1", 26379),), "m", {})
    assert parse_sentinel_url("REDISS+SENTINEL://s1:1/m/").tls is True


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://:s3cret@/mymaster/0", "no sentinel host"),
        ("redis+sentinel://:s3cret@s1:26379", "no service name"),
        ("redis+sentinel://:s3cret@s1:26379/", "no service name"),
        ("redis+sentinel://:s3cret@s1:26379//0", "no service name"),
        ("redis+sentinel://:s3cret@s1,s2:port/m/0", "bad port in sentinel address 's2:port'"),
        ("redis+sentinel://:s3cret@s1:70000/m/0", "bad port"),
        ("redis+sentinel://:s3cret@s1:26379,,s2/m/0", "without a host"),
        ("redis+sentinel://:s3cret@s1:26379/m/zero", "the db must be a number"),
        ("redis+sentinel://:s3cret@s1:26379/m/0/x", "path is /service_name"),
        ("redis+sentinel://:s3cret@s1/m/0?socket_timeout=soon", "Invalid value for 'socket_t"),
    ],
)
def test_a_bad_sentinel_url_is_one_clear_error_at_app_time(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid Redis URL 'redis\+sentinel://:\*\*\*@") as info:
        fastq.App(url)
    assert "s3cret" not in str(info.value)
    assert re.search(why, str(info.value)), str(info.value)


def test_a_sentinel_url_makes_a_master_client_that_asks_the_sentinels() -> None:
    """Nothing connects here: the client is built as redis-py's Sentinel support
    builds it, with the URL's options for the master and for the sentinels."""
    app = fastq.App(
        "redis+sentinel://:mpw@127.0.0.1:1,127.0.0.1:2/mymaster/2?sentinel_password=spw"
    )
    client = app.new_client(retries=0, socket_timeout_s=40.0, connect_timeout_s=3.0)
    try:
        assert isinstance(client, SentinelMasterClient)
        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool) and pool.is_master
        assert pool.service_name == "mymaster"
        options = pool.connection_kwargs
        assert (options["db"], options["password"], options["socket_timeout"]) == (2, "mpw", 40.0)
        sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
        assert [(s["host"], s["port"]) for s in sentinels] == [("127.0.0.1", 1), ("127.0.0.1", 2)]
        # the sentinels' own password, and a short timeout: a sentinel answers at once
        assert all(s["password"] == "spw" and s["socket_timeout"] == 3.0 for s in sentinels)
        # no sentinel answers: a connection error, which fastq's fault classes call an outage
        with pytest.raises(redis.ConnectionError) as info:
            client.ping()
        assert classify(info.value) is Fault.UNAVAILABLE
    finally:
        client.close()
        app.close()


def test_tls_files_go_to_a_rediss_sentinel_url() -> None:
    url = "rediss+sentinel://s1:26379/m/0"
    assert with_tls_files(url, ca_cert="/ca", cert=None, key=None) == url + "?ssl_ca_certs=/ca"
    parsed = parse_sentinel_url(url + "?ssl_ca_certs=/ca")
    assert parsed.tls and parsed.master_options == {"db": 0, "ssl_ca_certs": "/ca"}
