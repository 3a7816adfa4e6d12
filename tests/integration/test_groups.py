"""Groups through the whole path: ``group=`` and a job's group template at enqueue
(checked, in Redis and in the test mode), and the fair share a real ``pool -c 2``
gives tenants of very different sizes enqueued one after the other."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

import fastq
from fastq.testing.redis_server import RedisServer
from tests.support.pool import Pool, wait_until
from tests.support.processes import run_cli
from tests.support.workers import drain


def test_fair_share_small_tenants_run_before_a_big_one_gets_far(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """Tenants of 30,000, 300 and 30 jobs, enqueued in that order on one queue: C's
    30 all run before A has run 1,000, and B's 300 before A has run 3,000."""
    from tests.apps.group_jobs import app, mail

    app.configure(redis_url=redis_server.url, namespace=namespace)
    sizes = {"A": 30_000, "B": 300, "C": 30}
    for tenant, size in sizes.items():
        mail.enqueue_many([(tenant, i) for i in range(size)])
    runs_file = tmp_path / "runs.txt"
    pool = Pool(
        redis_server.url,
        namespace,
        tmp_path / "pool.log",
        "-c",
        "2",
        app="tests.apps.group_jobs",
        env={"GROUP_JOBS_RUNS_FILE": str(runs_file)},
    )
    total = sum(sizes.values())
    try:
        wait_until(
            lambda: runs_file.exists() and runs_file.read_text().count("\n") >= total,
            180,
            f"{total} runs",
        )
        assert pool.stop() == 0
    finally:
        pool.kill()
    order = runs_file.read_text().split()
    assert len(order) == total
    for tenant, size in sizes.items():
        assert order.count(tenant) == size

    def a_before_last(tenant: str) -> int:
        last = max(i for i, t in enumerate(order) if t == tenant)
        return order[:last].count("A")

    assert a_before_last("C") < 1000, a_before_last("C")
    assert a_before_last("B") < 3000, a_before_last("B")
    assert app.stats("q")["processed"] == total


def test_group_and_the_template_reach_redis_and_run_round_robin(app: fastq.App) -> None:
    ran: list[tuple[str, int]] = []

    @app.job(queue="q", group="t-{tenant}")
    def mail(tenant: str, i: int) -> None:
        ran.append((tenant, i))

    mail.enqueue_many([("a", i) for i in range(4)])
    mail.enqueue_many([{"tenant": "b", "i": i} for i in range(2)])
    # group= overrides the template, for every call
    mail.enqueue_many([("x", 9)], group="vip")
    app.enqueue("mail", ["c", 0])
    k = app.keys("q")
    members = [m.decode().split("\n")[0] for m in app.redis.zrange(k.group_ready, 0, -1)]
    assert sorted(members) == ["t-a"] * 4 + ["t-b"] * 2 + ["t-c", "vip"]
    assert app.redis.lrange(k.group_ring, 0, -1) == [b"", b"t-a", b"t-b", b"vip", b"t-c"]
    drain(app, ["q"], batch_size=100)
    assert ran == [("a", 0), ("b", 0), ("x", 9), ("c", 0), ("a", 1), ("b", 1), ("a", 2), ("a", 3)]


def test_a_template_mixing_calls_of_several_groups_keeps_their_order(app: fastq.App) -> None:
    ran: list[int] = []

    @app.job(queue="q", group="{tenant}")
    def mail(tenant: str, i: int) -> None:
        ran.append(i)

    ids = mail.enqueue_many([("a" if i % 3 else "b", i) for i in range(9)])
    envs = app.redis.hmget(app.keys("q").jobs, ids)
    assert [orjson.loads(e)[1][1] for e in envs if e] == list(range(9))
    drain(app, ["q"], batch_size=100)
    # each group's calls in their order, the groups taking turns
    assert sorted(ran) == list(range(9))
    assert [i for i in ran if i % 3 == 0] == [0, 3, 6]
    assert [i for i in ran if i % 3] == [1, 2, 4, 5, 7, 8]
    assert ran[:6] == [0, 1, 3, 2, 6, 4]


BAD_GROUPS = [
    ("", ValueError, "invalid group '': it must be 1 to 100 printable characters"),
    ("x" * 101, ValueError, "it must be 1 to 100 printable characters"),
    ("a\nb", ValueError, "it must be 1 to 100 printable characters"),
    (7, TypeError, "group must be a str, not int"),
]


@pytest.mark.parametrize("group, error, message", BAD_GROUPS)
def test_a_bad_group_is_refused_before_anything_is_sent(
    app: fastq.App, group: object, error: type[Exception], message: str
) -> None:
    @app.job(queue="q")
    def job(i: int) -> None: ...

    with pytest.raises(error, match=message):
        job.enqueue_with(group=group)(1)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        app.enqueue_many("job", [(1,)], group=group)  # type: ignore[arg-type]
    with app.stub(), pytest.raises(error, match=message):
        job.enqueue_with(group=group)(1)  # type: ignore[arg-type]
    assert app.redis.exists(app.keys("q").jobs) == 0


def test_a_template_formatting_a_bad_group_is_refused_at_enqueue(app: fastq.App) -> None:
    @app.job(queue="q", group="{tenant}")
    def job(tenant: str) -> None: ...

    with pytest.raises(ValueError, match=r"invalid group \(from '\{tenant\}'\) 'a\\nb'"):
        job.enqueue("a\nb")
    with pytest.raises(ValueError, match=r"call 1: invalid group \(from '\{tenant\}'\) ''"):
        job.enqueue_many([("ok",), ("",)])
    with app.stub(), pytest.raises(ValueError, match="invalid group"):
        job.enqueue("x" * 101)
    assert app.redis.exists(app.keys("q").jobs) == 0


@pytest.mark.parametrize(
    "template, message",
    [
        ("{nope}", "group '{nope}': 'nope' is not a parameter of the job"),
        ("{0}", "group '{0}': {0} is not a plain {name} of a parameter"),
        ("", "group must be 1 to 200 characters"),
    ],
)
def test_a_bad_template_is_refused_at_registration(
    app: fastq.App, template: str, message: str
) -> None:
    def job(tenant: str) -> None: ...

    with pytest.raises(ValueError, match=re.escape(message)):
        app.job(queue="q", group=template)(job)


def test_the_test_mode_keeps_each_jobs_group() -> None:
    app = fastq.App("redis://127.0.0.1:1/0")

    @app.job(queue="q", group="t-{tenant}")
    def mail(tenant: str) -> None: ...

    with app.stub() as jobs:
        mail.enqueue("a")
        mail.enqueue_many([("b",), ("c",)])
        mail.enqueue_with(group="vip")("d")
    assert [j.group for j in jobs] == ["t-a", "t-b", "t-c", "vip"]


def test_a_sharded_queue_holding_only_grouped_jobs_is_drained(app: fastq.App) -> None:
    ran: list[int] = []

    @app.job(queue="s", shards=3, group="t-{tenant}")
    def mail(tenant: str, i: int) -> None:
        ran.append(i)

    mail.enqueue_many([("a" if i % 2 else "b", i) for i in range(300)])
    assert all(app.redis.llen(app.keys(name).ready) == 0 for name in ("s", "s#1", "s#2"))
    assert all(app.redis.zcard(app.keys(name).group_ready) > 0 for name in ("s", "s#1", "s#2"))
    drain(app, ["s"], batch_size=20)
    assert sorted(ran) == list(range(300))
    assert app.stats("s")["ready"] == 0 and app.stats("s")["processed"] == 300


def test_a_queues_groups_are_listed_with_their_depth_in_the_order_served(
    app: fastq.App, redis_server: RedisServer
) -> None:
    @app.job(queue="q", group="t-{tenant}")
    def mail(tenant: str, i: int) -> None:
        pass

    @app.job(queue="q")
    def plain() -> None:
        pass

    mail.enqueue_many([("a", i) for i in range(5)])
    mail.enqueue_many([("b", i) for i in range(2)])
    app.enqueue("mail", ("c", 1), queue="q", group="vip")
    plain.enqueue()
    assert app.groups("q") == {"t-a": 5, "t-b": 2, "vip": 1, "": 1}
    assert [g for g in app.groups("q") if g] == ["t-a", "t-b", "vip"]  # the ring's order
    out = run_cli(redis_server.url, "groups", "--namespace", app.namespace, "-q", "q")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["group", "ready"]
    assert {tuple(line.split()) for line in lines[1:]} == {
        ("t-a", "5"),
        ("t-b", "2"),
        ("vip", "1"),
        ("(no", "group)", "1"),
    }
    out = run_cli(redis_server.url, "groups", "--namespace", app.namespace, "-q", "nope")
    assert out.returncode == 2 and "unknown queue 'nope'" in out.stderr


def test_a_paused_group_waits_in_its_place_while_the_others_run(
    app: fastq.App, redis_server: RedisServer
) -> None:
    ran: list[str] = []

    @app.job(queue="q", group="t-{tenant}")
    def mail(tenant: str, i: int) -> None:
        ran.append(tenant)

    @app.job(queue="q")
    def plain() -> None:
        ran.append("-")

    mail.enqueue_many([("a", i) for i in range(50)])
    mail.enqueue_many([("b", i) for i in range(5)])
    plain.enqueue()
    app.pause_group("q", "t-a")
    app.pause_group("q", "t-a")  # a no-op
    assert app.paused_groups("q") == ["t-a"]
    drain(app, ["q"])
    assert sorted(ran) == ["-"] + ["b"] * 5  # a's wait
    assert app.groups("q") == {"t-a": 50}
    out = run_cli(redis_server.url, "groups", "--namespace", app.namespace, "-q", "q")
    assert out.returncode == 0 and out.stdout.splitlines()[1].split() == ["t-a", "50", "paused"]
    out = run_cli(
        redis_server.url, "groups", "--namespace", app.namespace, "-q", "q", "--resume", "t-a"
    )
    assert out.returncode == 0 and out.stdout == "resumed group t-a of q\n"
    assert app.paused_groups("q") == []
    drain(app, ["q"])
    assert sorted(ran) == ["-"] + ["a"] * 50 + ["b"] * 5
    for bad, error in (("", ValueError), ("a\nb", ValueError), (5, TypeError)):
        with pytest.raises(error):
            app.pause_group("q", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown queue"):
        app.pause_group("nope", "t-a")
