"""Dramatiq's side: ``dramatiq dramatiq_tasks -p 2 -t 1`` runs it."""

from __future__ import annotations

import time

import dramatiq
from counting import record, report, url
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=url()))


@dramatiq.actor(queue_name="noop")
def noop(i: int) -> None:
    record(i)


def enqueue(n: int) -> None:
    t0 = time.perf_counter()
    for i in range(n):  # no bulk API: send() in a loop
        noop.send(i)
    report(time.perf_counter() - t0, n)
