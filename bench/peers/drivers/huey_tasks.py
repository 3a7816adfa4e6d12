"""huey's side: ``huey_consumer huey_tasks.huey -w 2 -k process`` runs it."""

from __future__ import annotations

import time

from counting import MAIL, count, record, report, url
from huey import RedisHuey

huey = RedisHuey("peerbench", url=url(), results=False)


@huey.task()
def noop(i: int) -> None:
    record(i)


@huey.task()
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    t0 = time.perf_counter()
    for i in range(n):  # no bulk API: call the task in a loop
        if kind == "noop":
            noop(i)
        else:
            send_email(*MAIL)
    report(time.perf_counter() - t0, n)
