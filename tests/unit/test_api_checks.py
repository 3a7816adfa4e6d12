"""Checks that need no Redis: names, argument binding, policies, ids."""

from __future__ import annotations

import pytest

import fastq
from fastq import contracts
from fastq.job import ArgChecker, IdGenerator
from fastq.keys import QueueKeys, validate_queue_name


def test_keys_carry_the_queue_hash_tag() -> None:
    k = QueueKeys("fastq", "mailer")
    assert k.ready == "fastq:{mailer}:ready"
    assert k.held("host:1:ab") == "fastq:{mailer}:held:host:1:ab"
    every = [key for c in contracts.ALL for key in c.keys_for(k, "w")]
    assert all("{mailer}" in key for key in every)


@pytest.mark.parametrize("name", ["a:b", "{a", "a}", "", "a b", "x" * 201])
def test_bad_queue_names(name: str) -> None:
    with pytest.raises(ValueError):
        validate_queue_name(name)


def test_queue_name_must_be_str() -> None:
    with pytest.raises(TypeError):
        validate_queue_name(3)


def test_arg_checker_fast_path_and_full_bind() -> None:
    def f(a: int, b: int = 2) -> None: ...

    def g(a: int, *rest: int, key: str = "k") -> None: ...

    cf, cg = ArgChecker(f), ArgChecker(g)
    cf.check((1,), None)
    cf.check((1, 2), None)
    cf.check((), {"a": 1})
    for bad_args, bad_kwargs in [((), None), ((1, 2, 3), None), ((1,), {"zz": 1})]:
        with pytest.raises(TypeError, match=r"arguments do not fit f\(a"):
            cf.check(bad_args, bad_kwargs)
    cg.check((1, 2, 3), {"key": "x"})
    assert not cg.binds([], {})


def test_job_names_are_unique_per_app() -> None:
    app = fastq.App(namespace="unit")

    @app.job
    def send() -> None: ...

    def other() -> None: ...

    other.__name__ = "send"
    with pytest.raises(ValueError, match="already registered"):
        app.job(other)
    assert app.job(name="send2")(other).name == "send2"
    assert send() is None  # calling a job runs it here


def test_ids_are_unique_and_renewed_per_process() -> None:
    gen = IdGenerator()
    ids = gen.next_ids(1000) + gen.next_ids(1000)
    assert len(set(ids)) == 2000
    gen._pid = -1  # as if forked
    assert not set(gen.next_ids(10)) & set(ids)


def test_accelerated_flag_matches_the_codec_in_use() -> None:
    from fastq import _accel

    assert _accel.codec.__name__.startswith("fastq_ext") == fastq.ACCELERATED
