"""Dramatiq's side: ``dramatiq dramatiq_tasks -p 2 -t 1 -Q noop`` runs it."""

from __future__ import annotations

import time

import dramatiq
from counting import MAIL, count, record, report, url
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=url()))


@dramatiq.actor(queue_name="noop")
def noop(i: int) -> None:
    record(i)


@dramatiq.actor(queue_name="noop")
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    t0 = time.perf_counter()
    for i in range(n):  # no bulk API: send() in a loop
        if kind == "noop":
            noop.send(i)
        else:
            send_email.send(*MAIL)
    report(time.perf_counter() - t0, n)
