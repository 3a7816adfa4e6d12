"""A per-key rate limit's key, formatted from a job's arguments (no Redis)."""

from __future__ import annotations

import hashlib

from fastq.ratelimit import MAX_KEY_CHARS, RateKey
from fastq.validate import RateLimit

LIMIT = RateLimit(5, 1000, 1)


def send(account: str, to: str, relay: str = "eu") -> None:
    pass


def test_the_key_binds_positional_keyword_and_default_arguments() -> None:
    key = RateKey(send, "smtp:{relay}:{account}", LIMIT)
    assert key.key_for(["acme", "a@b.c"], {}) == "smtp:eu:acme"
    assert key.key_for(["acme"], {"to": "a@b.c", "relay": "us"}) == "smtp:us:acme"
    assert key.key_for([], {"account": 42, "to": "x"}) == "smtp:eu:42"


def test_arguments_that_do_not_bind_give_no_key() -> None:
    key = RateKey(send, "smtp:{account}", LIMIT)
    assert key.key_for([], {}) is None  # the run fails as broken, no token taken
    assert key.key_for(["a", "b", "c", "d"], {}) is None


def test_a_long_key_is_replaced_by_its_sha1() -> None:
    key = RateKey(send, "smtp:{account}", LIMIT)
    long_account = "x" * 500
    expected = "sha1:" + hashlib.sha1(f"smtp:{long_account}".encode()).hexdigest()
    assert key.key_for([long_account, "to"], {}) == expected
    assert len(key.key_for(["y" * (MAX_KEY_CHARS - 5), "to"], {}) or "") == MAX_KEY_CHARS


def test_a_key_without_fields_is_one_key_for_every_job() -> None:
    key = RateKey(send, "relay", LIMIT)
    assert key.key_for(["a", "b"], {}) == key.key_for(["c", "d"], {}) == "relay"
