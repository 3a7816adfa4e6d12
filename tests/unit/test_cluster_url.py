"""Redis Cluster URLs: what they name, what they refuse, and their passwords masked;
and every script's KEYS in one slot."""

from __future__ import annotations

from typing import Any

import pytest
from redis.cluster import key_slot
from redis.connection import SSLConnection

import fastq
from fastq.connection.cluster import is_cluster_url, parse_cluster_url
from fastq.connection.url import mask_url
from fastq.protocol import contracts
from fastq.protocol.keys import BatchKeys, NamespaceKeys, QueueKeys


def test_a_cluster_url_names_its_nodes_and_options() -> None:
    target = parse_cluster_url(
        "redis+cluster://bob:p%40ss@10.0.0.1:7000,node-2:7001,[::1]:7002,node-4/?socket_timeout=3"
    )
    assert target.nodes == (("10.0.0.1", 7000), ("node-2", 7001), ("::1", 7002), ("node-4", 6379))
    assert target.options == {"username": "bob", "password": "p@ss", "socket_timeout": 3.0}


def test_tls_and_a_plain_url_of_one_node() -> None:
    tls = parse_cluster_url("rediss+cluster://:pw@h:7000")
    assert tls.nodes == (("h", 7000),)
    assert tls.options == {"password": "pw", "connection_class": SSLConnection}
    one = parse_cluster_url("redis://:pw@h:7000/0")  # App(url, cluster=True)
    assert (one.nodes, one.options) == ((("h", 7000),), {"password": "pw"})


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+cluster://:s3cret@", "no host:port given"),
        ("redis+cluster://:s3cret@h:notaport", "'h:notaport' is not host:port"),
        ("redis+cluster://:s3cret@h:1,,h:2", "'' is not host:port"),
        ("redis+cluster://:s3cret@h:99999", "port 99999 out of range"),
        ("redis+cluster://:s3cret@h:1/2", "a cluster has only database 0"),
        ("redis+cluster://:s3cret@h:1/?db=3", "a cluster has only database 0"),
        ("redis+cluster://:s3cret@h:1/?socket_timeout=x", "Invalid value for 'socket_timeout'"),
        ("redis://:s3cret@h:1,h:2", "several nodes need a redis+cluster:// URL"),
        ("unix://:s3cret@/tmp/r.sock", "a cluster URL starts with redis+cluster://"),
    ],
)
def test_a_bad_cluster_url_is_one_clear_error_with_its_password_masked(url: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        fastq.App(url, cluster=True)
    message = str(info.value)
    assert message.startswith("invalid Redis Cluster URL '")
    assert why in message
    assert "s3cret" not in message and ":***@" in message


def test_the_scheme_says_cluster_and_cluster_true_says_it_of_a_plain_url() -> None:
    assert is_cluster_url("redis+cluster://h:1") and is_cluster_url("REDISS+CLUSTER://h:1")
    assert not is_cluster_url("redis://h:1")
    assert fastq.App("redis+cluster://h:1,h:2").cluster
    assert fastq.App("redis://h:1/0", cluster=True).cluster
    assert not fastq.App("redis://h:1/0").cluster


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis+cluster://:s3cret@h1:1,h2:2", "redis+cluster://:***@h1:1,h2:2"),
        (
            "rediss+cluster://bob:s3cret@[::1]:1,[::1]:2/?password=s3cret",
            "rediss+cluster://bob:***@[::1]:1,[::1]:2/?password=***",
        ),
        ("redis+cluster://h1:1,h2:2", "redis+cluster://h1:1,h2:2"),
        ("redis+cluster://:s3cret@[::1", "redis+cluster://***"),  # unparsable: scheme alone
    ],
)
def test_mask_url_hides_a_cluster_urls_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@pytest.mark.parametrize("contract", contracts.ALL, ids=lambda c: c.name)
def test_every_scripts_keys_share_one_cluster_slot(contract: contracts.Contract[Any]) -> None:
    """A script call goes to one node only if all its KEYS hash to one slot (no
    namespace-wide key among a queue's), or a cluster answers CROSSSLOT."""
    if contract.key_space is NamespaceKeys:  # a circuit breaker's: one key, no queue's
        assert len(contract.keys_for(NamespaceKeys("ns:a"), "smtp:{a}")) == 1
        return
    if contract.key_space is BatchKeys:  # a batch's own hash: its id is the hash tag
        keys = contract.keys_for(BatchKeys("ns:a", "b-1.x"))
        assert {key_slot(key.encode()) for key in keys} == {key_slot(b"b-1.x")}
        return
    keys = contract.keys_for(QueueKeys("ns:a", "mail.out-1"), "host:12:ab")
    assert keys
    assert {key_slot(key.encode()) for key in keys} == {key_slot(b"mail.out-1")}
