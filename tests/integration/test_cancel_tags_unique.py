"""Tags, cancel and unique jobs end to end: the producer API, in-process workers and
producer subprocesses on a real redis-server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable

import pytest
import redis

import fastq
from fastq.testing.redis_server import RedisServer
from fastq.worker.worker import Worker
from tests.support.processes import ROOT, run_cli, subprocess_env
from tests.support.workers import drain, drain_in_thread


class Runs:
    """Every run of a job, by its first argument, from any worker thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[Any, int] = {}

    def record(self, key: Any) -> None:
        with self.lock:
            self.count[key] = self.count.get(key, 0) + 1

    def total(self) -> int:
        with self.lock:
            return sum(self.count.values())


# -- tags ------------------------------------------------------------------------------


def test_jobs_by_tag_pages_through_queues_and_forgets_jobs_that_end(app: fastq.App) -> None:
    @app.job(queue="mail")
    def send(i: int) -> None:
        pass

    @app.job(queue="sms")
    def text(i: int) -> None:
        pass

    mail = send.enqueue_many([(i,) for i in range(5)], tags=["campaign:42"])
    sms = app.enqueue("text", (1,), tags=["campaign:42", "sms"])
    later = send.enqueue_with(tags=["campaign:42"], delay_s=3600)(9)
    send.enqueue(100)  # untagged
    seen: list[tuple[str, str, str]] = []
    cursor = None
    pages = 0
    while True:
        page = app.jobs_by_tag("campaign:42", cursor=cursor, count=3)
        seen += [(j.id, j.queue, j.state) for j in page.jobs]
        pages += 1
        if page.cursor is None:
            break
        cursor = page.cursor
    expected = sorted((i, "mail", "queued") for i in mail)
    expected = sorted([*expected, (later, "mail", "scheduled")]) + [(sms, "sms", "queued")]
    assert seen == expected and pages == 3
    assert [j.id for j in app.jobs_by_tag("sms").jobs] == [sms]
    info = app.get_job(sms)
    assert info is not None and info.tags == ["campaign:42", "sms"]
    drain(app, ["mail", "sms"])
    assert [(j.id, j.state) for j in app.jobs_by_tag("campaign:42").jobs] == [(later, "scheduled")]
    assert app.jobs_by_tag("campaign:42", queue="sms").jobs == []


# -- cancel ----------------------------------------------------------------------------


def test_cancel_a_ready_and_a_scheduled_job_and_they_never_run(app: fastq.App) -> None:
    runs = Runs()

    @app.job(queue="q", retries=0)
    def work(i: int) -> None:
        runs.record(i)

    ready = work.enqueue(1)
    scheduled = work.enqueue_in(0.2, 2)
    kept = work.enqueue(3)
    assert app.cancel(ready) == fastq.Cancelled(stopped=1)
    assert app.cancel(scheduled, queue="q") == fastq.Cancelled(stopped=1)
    assert app.cancel(ready) == fastq.Cancelled()  # once
    assert app.cancel("no-such-job") == fastq.Cancelled()
    info = app.get_job(ready)
    assert info is not None and info.state == "cancelled" and info.cancelled_at is not None
    assert app.stats("q")["cancelled"] == 2
    time.sleep(0.3)  # the scheduled one would be due now
    drain(app, ["q"])
    assert runs.count == {3: 1}
    info = app.get_job(kept)
    assert info is not None and info.state == "done" and info.ended_at is not None
    assert not app.cancel(kept)  # completed
    # a cancelled id stays cancelled: enqueueing it again adds nothing
    assert work.enqueue_with(job_id=ready)(1) == ready
    drain(app, ["q"])
    assert runs.count == {3: 1}
    stats = app.stats("q")
    assert (stats["processed"], stats["cancelled"], stats["ready"]) == (1, 2, 0)


def test_a_job_cancelled_while_it_runs_is_not_retried(app: fastq.App) -> None:
    started = threading.Event()
    go_on = threading.Event()
    runs = Runs()

    @app.job(queue="q", retries=3, backoff_s=0.01)
    def flaky() -> None:
        runs.record("flaky")
        started.set()
        go_on.wait(10)
        raise RuntimeError("fails, and would be retried")

    job_id = flaky.enqueue_with(tags=["nightly"])()
    worker, thread = drain_in_thread(app, ["q"])
    assert started.wait(10)
    assert [(j.id, j.state) for j in app.jobs_by_tag("nightly").jobs] == [(job_id, "active")]
    # running: reported held (it may still run), not counted cancelled yet
    assert app.cancel(job_id) == fastq.Cancelled(held=1)
    assert app.stats("q")["cancelled"] == 0
    assert app.jobs_by_tag("nightly").jobs == []
    go_on.set()
    thread.join(20)
    assert not thread.is_alive()
    assert runs.count == {"flaky": 1}
    info = app.get_job(job_id)
    assert info is not None and info.state == "cancelled"
    stats = app.stats("q")
    assert (stats["retried"], stats["total_dead"], stats["cancelled"]) == (0, 0, 1)
    assert (stats["scheduled"], stats["dead"], stats["inflight"]) == (0, 0, 0)


def test_cancel_by_tag_in_the_middle_of_a_drain_stops_the_rest(app: fastq.App) -> None:
    runs = Runs()

    @app.job(queue="blast")
    def send(i: int) -> None:
        runs.record(i)
        time.sleep(0.0005)

    n = 5000
    send.enqueue_many([(i,) for i in range(n)], tags=["campaign:7"])
    send.enqueue_many([(i,) for i in range(n, n + 100)], tags=["campaign:8"])
    workers: list[tuple[Worker, threading.Thread]] = [
        drain_in_thread(app, ["blast"], batch_size=20) for _ in range(3)
    ]
    deadline = time.monotonic() + 30
    while runs.total() < 500 and time.monotonic() < deadline:
        time.sleep(0.005)
    cancelled = app.cancel_by_tag("campaign:7")
    for _, thread in workers:
        thread.join(60)
        assert not thread.is_alive()
    ran = {i for i in runs.count if i < n}
    assert set(runs.count.values()) == {1}  # none twice
    assert {i for i in runs.count if i >= n} == set(range(n, n + 100))  # the other tag ran
    stats = app.stats("blast")
    # the counts add up: every job was stopped, or ran (those held at the cancel
    # too, reported apart), and the cancelled stat counts exactly those stopped
    assert len(ran) + cancelled.stopped == n
    assert stats["cancelled"] == cancelled.stopped > 0 and 500 <= len(ran) < n
    assert (stats["processed"], stats["ready"], stats["inflight"]) == (len(ran) + 100, 0, 0)
    assert app.jobs_by_tag("campaign:7").jobs == []


def test_purge_cleans_the_tag_index_and_unique_locks(app: fastq.App) -> None:
    @app.job(queue="q", unique_for_s=600)
    def work(i: int) -> None:
        pass

    first = work.enqueue_with(tags=["t"])(1)
    assert work.enqueue(1) == first
    assert app.purge("q") == 1
    assert app.jobs_by_tag("t").jobs == []
    assert work.enqueue(1) != first  # the lock went with the job


# -- unique jobs -----------------------------------------------------------------------


def test_a_unique_job_enqueued_twice_runs_once_and_its_end_frees_the_key(
    app: fastq.App,
) -> None:
    runs = Runs()

    @app.job(queue="q", unique_for_s=600)
    def report(day: str, *, full: bool = False) -> None:
        runs.record((day, full))

    first = report.enqueue("2026-11-23", full=True)
    assert report.enqueue("2026-11-23", full=True) == first
    assert app.enqueue("report", ("2026-11-23",), {"full": True}) == first
    other = report.enqueue("2026-11-24")
    assert other != first
    # within one batch too; the key is of the arguments as given (positional or not)
    ids = report.enqueue_many([("2026-11-25",), ("2026-11-25",), {"day": "2026-11-25"}])
    assert ids[0] == ids[1] and len({ids[0], ids[2], first, other}) == 4
    # an explicit key is shared by whatever arguments
    keyed = report.enqueue_with(unique_key="nightly")("a")
    assert report.enqueue_with(unique_key="nightly")("b") == keyed
    drain(app, ["q"])
    assert runs.count == {
        ("2026-11-23", True): 1,
        ("2026-11-24", False): 1,
        ("2026-11-25", False): 2,
        ("a", False): 1,
    }
    assert app.stats("q")["enqueued"] == 5
    again = report.enqueue("2026-11-23", full=True)
    assert again != first  # the first one completed: its lock went with it


def test_a_unique_job_that_dies_releases_its_lock(app: fastq.App) -> None:
    @app.job(queue="q", retries=0, unique_for_s=600)
    def doomed(i: int) -> None:
        raise ValueError("no")

    first = doomed.enqueue(1)
    assert doomed.enqueue(1) == first
    drain(app, ["q"])
    info = app.get_job(first)
    assert info is not None and info.state == "dead"
    second = doomed.enqueue(1)
    assert second != first
    assert doomed.enqueue(1) == second


def test_unique_until_start_lets_one_copy_wait_while_one_runs(app: fastq.App) -> None:
    started = threading.Event()
    go_on = threading.Event()

    @app.job(queue="q", unique_for_s=600, unique_until="start")
    def sync() -> None:
        started.set()
        go_on.wait(10)

    first = sync.enqueue()
    assert sync.enqueue() == first
    _, thread = drain_in_thread(app, ["q"], batch_size=1)
    assert started.wait(10)
    waiting = sync.enqueue()  # the first one has started: its lock is gone
    assert waiting != first and sync.enqueue() == waiting
    go_on.set()
    thread.join(20)
    assert app.stats("q")["processed"] == 2


def test_unique_until_window_keeps_the_lock_after_the_job_ends(app: fastq.App) -> None:
    @app.job(queue="q", unique_for_s=0.5, unique_until="window")
    def ping() -> None:
        pass

    first = ping.enqueue()
    drain(app, ["q"])
    assert getattr(app.get_job(first), "state", None) == "done"  # done
    assert ping.enqueue() == first  # still within the window
    time.sleep(0.6)
    assert ping.enqueue() != first


_PRODUCER = textwrap.dedent(
    """
    import sys, time
    import fastq

    url, namespace, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    app = fastq.App(url, namespace=namespace)

    @app.job(queue="u", unique_for_s=600)
    def refresh(account: int) -> None:
        pass

    app.redis  # connect and load the scripts before the start line
    time.sleep(max(0.0, start - time.time()))
    ids = {refresh.enqueue(42) for _ in range(50)}
    print(" ".join(sorted(ids)))
    """
)


@pytest.mark.slow
def test_the_same_unique_job_from_8_processes_50_times_each_runs_once(
    redis_server: RedisServer, app: fastq.App
) -> None:
    runs = Runs()

    @app.job(queue="u", unique_for_s=600)
    def refresh(account: int) -> None:
        runs.record(account)

    start = time.time() + 2.0
    env = subprocess_env(redis_server.url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PRODUCER, redis_server.url, app.namespace, str(start)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    ids = {job_id for out, _ in outs for job_id in out.split()}
    assert len(ids) == 1  # every one of the 400 enqueues returned the same id
    drain(app, ["u"])
    assert runs.count == {42: 1}
    stats = app.stats("u")
    assert (stats["enqueued"], stats["processed"]) == (1, 1)


# -- bad input -------------------------------------------------------------------------


def _nothing_written(app: fastq.App, r: redis.Redis) -> bool:
    return list(r.scan_iter(match=f"{app.namespace}:*")) == []


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda a: a.enqueue("j", tags="campaign"), TypeError, "tags must be a list of str"),
        (lambda a: a.enqueue("j", tags=[]), ValueError, "tags must hold 1 to 20 tags"),
        (lambda a: a.enqueue("j", tags=["t"] * 21), ValueError, "tags must hold 1 to 20"),
        (lambda a: a.enqueue("j", tags=[42]), TypeError, r"tags\[0\] must be a str"),
        (lambda a: a.enqueue("j", tags=["x" * 101]), ValueError, r"invalid tags\[0\]"),
        (lambda a: a.enqueue("j", tags=["ok", "a\nb"]), ValueError, r"invalid tags\[1\]"),
        (lambda a: a.enqueue("j", tags=[""]), ValueError, r"invalid tags\[0\]"),
        (lambda a: a.enqueue_many("j", [()], tags=[None]), TypeError, r"tags\[0\] must be"),
        (
            lambda a: a.enqueue("j", unique_for_s=60, unique_key=7),
            TypeError,
            "unique_key must be a str",
        ),
        (
            lambda a: a.enqueue("j", unique_for_s=60, unique_key=""),
            ValueError,
            "invalid unique_key",
        ),
        (
            lambda a: a.enqueue("j", unique_for_s=60, unique_key="a\tb"),
            ValueError,
            "invalid unique_key",
        ),
        (lambda a: a.enqueue("j", unique_key="k"), ValueError, "need unique_for_s"),
        (lambda a: a.enqueue("j", unique_until="end"), ValueError, "need unique_for_s"),
        (lambda a: a.enqueue("j", unique_for_s=0), ValueError, "unique_for_s must be a finite"),
        (lambda a: a.enqueue("j", unique_for_s=-1), ValueError, "unique_for_s must be a finite"),
        (
            lambda a: a.enqueue("j", unique_for_s=float("inf")),
            ValueError,
            "unique_for_s must be a finite",
        ),
        (
            lambda a: a.enqueue("j", unique_for_s=float("nan")),
            ValueError,
            "unique_for_s must be a finite",
        ),
        (lambda a: a.enqueue("j", unique_for_s="60"), TypeError, "unique_for_s must be a number"),
        (lambda a: a.enqueue("j", unique_for_s=True), TypeError, "unique_for_s must be a number"),
        (
            lambda a: a.enqueue("j", unique_for_s=60, unique_until="finish"),
            ValueError,
            "unique_until must be one of 'end', 'start', 'window'",
        ),
        (lambda a: a.job(unique_for_s=0)(print), ValueError, "unique_for_s must be a finite"),
        (lambda a: a.job(unique_until="never")(print), ValueError, "unique_until must be one"),
        (lambda a: a.cancel_by_tag("a\nb"), ValueError, "invalid tag"),
        (lambda a: a.jobs_by_tag(["t"]), TypeError, "tag must be a str"),
        (lambda a: a.jobs_by_tag("t", count=0), ValueError, "count must be an int"),
        (lambda a: a.jobs_by_tag("t", cursor="nope"), ValueError, "invalid cursor"),
        (lambda a: a.cancel(""), ValueError, "invalid job_id"),
    ],
)
def test_bad_input_gets_a_clear_error_and_writes_nothing(
    app: fastq.App,
    r: redis.Redis,
    call: Callable[[fastq.App], Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        call(app)
    assert _nothing_written(app, r)
    assert "print" not in app.registry


# -- CLI -------------------------------------------------------------------------------


def test_cli_cancel_by_id_and_tag_and_list_jobs(redis_server: RedisServer, app: fastq.App) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        base = ("--app", "tests.apps.counting", "--namespace", app.namespace)
        return run_cli(redis_server.url, *args, *base)

    ids = app.enqueue_many("count", [(i,) for i in range(5)], queue="count", tags=["batch:1"])
    proc = cli("jobs", "--tag", "batch:1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{i} count queued" for i in sorted(ids)]
    proc = cli("cancel", ids[0], "-q", "count")
    assert (proc.returncode, proc.stdout.strip()) == (
        0,
        f"cancelled {ids[0]} (stopped: it will not run)",
    )
    proc = cli("cancel", ids[0])
    assert proc.returncode == 1 and "nothing to cancel" in proc.stdout
    proc = cli("cancel", "--tag", "batch:1")
    assert (proc.returncode, proc.stdout.strip()) == (
        0,
        "cancelled 4 jobs tagged 'batch:1': 4 stopped (never to run), 0 held by a worker "
        "(may still run)",
    )
    assert cli("jobs", "--tag", "batch:1").stdout == ""
    # their records, newest first: the four of the tag, then the first one
    proc = cli("jobs", "--state", "cancelled", "-q", "count")
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert sorted(line[0] for line in lines) == sorted(ids) and lines[-1][0] == ids[0]
    assert all(line[1:3] == ["count", "cancelled"] for line in lines)
    assert len(cli("jobs", "--state", "cancelled", "--limit", "2").stdout.splitlines()) == 2
    assert cli("jobs", "--state", "done", "-q", "count").stdout == ""
    proc = cli("cancel")
    assert proc.returncode == 2 and "give a JOB_ID or --tag TAG" in proc.stderr
    assert app.stats("count")["cancelled"] == 5
