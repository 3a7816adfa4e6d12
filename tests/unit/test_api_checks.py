"""Checks that need no Redis: names, argument binding, policies, ids."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, AsyncIterator, Iterator

import pytest

import fastq
from fastq.policy import ArgChecker
from fastq.producer import ids as ids_module
from fastq.producer.durable import durability
from fastq.producer.ids import IdGenerator
from fastq.protocol import contracts
from fastq.protocol.keys import QueueKeys, validate_queue_name


def test_keys_carry_the_queue_hash_tag() -> None:
    k = QueueKeys("fastq", "mailer")
    assert k.ready == "fastq:{mailer}:ready"
    assert k.held("host:1:ab") == "fastq:{mailer}:held:host:1:ab"
    every = [key for c in contracts.ALL if c.key_space is QueueKeys for key in c.keys_for(k, "w")]
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


def test_ids_are_14_alphanumerics_and_a_used_up_counter_draws_a_new_prefix() -> None:
    gen = IdGenerator()
    first = gen.next_ids(3)
    assert all(len(i) == 14 and i.isascii() and i.isalnum() for i in first)
    assert len({i[:10] for i in first}) == 1  # one prefix, a counter after it
    gen._next = ids_module.ID_COUNTER_SPAN - 2  # two ids left on this prefix
    ids = gen.next_ids(5)
    assert len(set(ids)) == 5 and not set(ids) & set(first)
    assert [i[:10] == first[0][:10] for i in ids] == [True, True, False, False, False]
    assert all(len(i) == 14 and i.isalnum() for i in ids)


def test_threads_sharing_one_generator_never_get_the_same_id() -> None:
    # a threaded server (fastq serve) shares one producer: unlocked, 8 threads got
    # 36,000 duplicates in 480,000 ids, each a job dropped as already enqueued
    gen = IdGenerator()
    got: list[list[str]] = []

    def draw() -> None:
        got.append([i for _ in range(5000) for i in gen.next_ids(3)])

    threads = [threading.Thread(target=draw) for _ in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a race shows in every run
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    ids = [i for batch in got for i in batch]
    assert len(ids) == 8 * 5000 * 3 and len(set(ids)) == len(ids)


def test_accelerated_flag_matches_the_codec_in_use() -> None:
    from fastq import _accel

    assert _accel.codec.__name__.startswith("fastq_ext") == fastq.ACCELERATED


@pytest.mark.parametrize(
    "name", ["a,b", "x" * 101, "a\u200bb", "a\x07b", "é", "a\nb", "a/b", "mail\ufeff"]
)
def test_queue_names_are_plain_ascii(name: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        validate_queue_name(name)


@pytest.mark.parametrize("name", ["a", "x" * 100, "mail-er_2.high", "A-Z.0_9"])
def test_good_queue_names(name: str) -> None:
    assert validate_queue_name(name) == name


def test_namespaces_are_checked() -> None:
    assert fastq.App(namespace="app:v2.prod-1").namespace == "app:v2.prod-1"
    for bad in ["", "a b", "a{b}", "a,b", "x" * 101, "ns\u200b"]:
        with pytest.raises(ValueError, match="namespace"):
            fastq.App(namespace=bad)


async def _coro(x: int) -> None: ...


async def _agen(x: int) -> AsyncIterator[int]:
    yield x


def _gen(x: int) -> Iterator[int]:
    yield x


class _AsyncCallable:
    async def __call__(self, x: int) -> None: ...


class _SyncCallable:
    def __call__(self, x: int) -> None: ...


@pytest.mark.parametrize(
    "fn, name, why",
    [
        (_agen, None, "an async generator function"),
        (_gen, None, "a generator function"),
        (5, "five", "is not callable"),
    ],
)
def test_jobs_a_worker_cannot_run_are_refused_at_registration(fn: Any, name: Any, why: str) -> None:
    app = fastq.App(namespace="unit")
    with pytest.raises(TypeError, match=f"cannot register job '{name or fn.__name__}'.*{why}"):
        app.job(name=name)(fn)
    with pytest.raises(TypeError, match=why):
        app.job(fn, name=name) if name else app.job(fn)
    assert app.registry == {}


@pytest.mark.parametrize(
    "fn, name",
    [
        (_coro, None),
        (functools.partial(_coro, 1), "p"),
        (functools.partial(functools.partial(_coro), 1), "pp"),
        (_AsyncCallable(), "obj"),
    ],
)
def test_async_jobs_are_registered_as_async(fn: Any, name: Any) -> None:
    app = fastq.App(namespace="unit")
    job = app.job(name=name)(fn) if name else app.job(fn)
    assert job.is_async


def test_async_jobs_are_refused_at_most_once() -> None:
    app = fastq.App(namespace="unit")
    with pytest.raises(TypeError, match="at-most-once delivery is not supported for async"):
        app.job(_coro, delivery="at_most_once")


def test_plain_callables_are_registered() -> None:
    app = fastq.App(namespace="unit")

    def plain(x: int) -> int:
        return x

    assert app.job(name="obj")(_SyncCallable()).name == "obj"
    assert app.job(name="part")(functools.partial(plain, 1)).name == "part"
    assert app.job(plain)(2) == 2
    assert not app.registry["plain"].is_async
    with pytest.raises(TypeError, match="give it a name="):
        app.job(functools.partial(plain, 1))


def test_enqueue_with_checks_its_options_at_once() -> None:
    app = fastq.App(namespace="unit")  # no Redis: nothing may be sent

    @app.job
    def job(x: int) -> None: ...

    for bad in [
        {"delay_s": float("inf")},
        {"delay_s": -1},
        {"priority": 2**21},
        {"job_id": "a b"},
        {"job_id": "fastq:x"},
        {"queue": "a,b"},
    ]:
        with pytest.raises(ValueError):
            job.enqueue_with(**bad)
    with pytest.raises(TypeError):
        job.enqueue_with(delay_s=True)
    with pytest.raises(TypeError):
        job.enqueue_with(priority="high")  # type: ignore[arg-type]


def test_any_job_id_fits_the_heartbeat_slot() -> None:
    from fastq import validate
    from fastq.shm import heartbeat

    assert validate.MAX_JOB_ID_BYTES <= heartbeat.MAX_ID_BYTES
    longest = "~" * validate.MAX_JOB_ID_BYTES
    assert validate.check_job_id(longest) == longest
    assert len(longest.encode()) <= heartbeat.MAX_ID_BYTES


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"min_replicas": -1}, ValueError, "min_replicas must be >= 0"),
        ({"min_replicas": 1.5}, TypeError, "min_replicas must be an int"),
        ({"min_replicas": True}, TypeError, "min_replicas must be an int"),
        ({"min_replicas": "1"}, TypeError, "min_replicas must be an int"),
        ({"replica_timeout_s": 0}, ValueError, r"replica_timeout_s must be .* \(0, 20\]"),
        ({"replica_timeout_s": -1}, ValueError, "replica_timeout_s"),
        ({"replica_timeout_s": float("nan")}, ValueError, "replica_timeout_s"),
        ({"replica_timeout_s": float("inf")}, ValueError, "replica_timeout_s"),
        ({"replica_timeout_s": 21}, ValueError, "replica_timeout_s"),
        ({"replica_timeout_s": "1"}, TypeError, "replica_timeout_s must be a number"),
        ({"replica_timeout_s": None}, TypeError, "replica_timeout_s must be a number"),
    ],
)
def test_durable_enqueue_options_are_checked(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        fastq.App(namespace="unit", **options)


def test_durable_enqueue_options() -> None:
    app = fastq.App(namespace="unit", min_replicas=2, replica_timeout_s=0.5)
    assert (app.min_replicas, app.replica_timeout_s) == (2, 0.5)
    assert durability(0, 1.0) is None  # off: the enqueue path is the plain one
    assert durability(1, 0.0001).timeout_ms == 1  # never WAIT 0, which blocks forever
    assert durability(1, 2.5).timeout_ms == 2500
