"""huey's side: ``huey_consumer huey_tasks.huey -w 2 -k process`` runs it."""

from __future__ import annotations

import time

from counting import count, jobs, record, report, url
from huey import RedisHuey

huey = RedisHuey("peerbench", url=url(), results=False)


@huey.task()
def noop(i: int) -> None:
    record(i)


@huey.task()
def io(i: int, ms: float) -> None:
    time.sleep(ms / 1000)
    record(i)


@huey.task()
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    tasks = {"noop": noop, "io": io, "send_email": send_email}
    todo = jobs(kind, 0, n)
    t0 = time.perf_counter()
    for name, args in todo:  # no bulk API: call the task in a loop
        tasks[name](*args)
    report(time.perf_counter() - t0, n)
