"""The one place a Redis URL's password is hidden, and the CLI's TLS files."""

from __future__ import annotations

import pytest

import fastq
from fastq.redis_url import mask_url, with_tls_files


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
        ("redis://bob:p%40ss@h/1", "redis://bob:***@h/1"),
        ("redis://bob@h/1", "redis://bob@h/1"),  # a user alone is no secret
        ("rediss://h:1/0?ssl_ca_certs=/a/ca.pem&password=s3cret",
         "rediss://h:1/0?ssl_ca_certs=/a/ca.pem&password=***"),
        ("unix:///tmp/r.sock?password=s3cret&db=2", "unix:///tmp/r.sock?password=***&db=2"),
        ("unix://bob:s3cret@/tmp/r.sock", "unix://bob:***@/tmp/r.sock"),
        ("rediss://h?ssl_password=s3cret", "rediss://h?ssl_password=***"),
    ],
)  # fmt: skip
def test_mask_url_hides_every_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_an_unparsable_url_shows_nothing_but_its_scheme() -> None:
    assert mask_url("redis://:s3cret@[::1") == "redis://***"
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
