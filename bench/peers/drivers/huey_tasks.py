"""huey's side: ``huey_consumer huey_tasks.huey -w 2 -k process`` runs it."""

from __future__ import annotations

import time

from counting import record, report, url
from huey import RedisHuey

huey = RedisHuey("peerbench", url=url(), results=False)


@huey.task()
def noop(i: int) -> None:
    record(i)


def enqueue(n: int) -> None:
    t0 = time.perf_counter()
    for i in range(n):  # no bulk API: call the task in a loop
        noop(i)
    report(time.perf_counter() - t0, n)
