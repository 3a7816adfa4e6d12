"""Dramatiq's side: ``dramatiq dramatiq_tasks -p 2 -t 1 -Q noop`` runs it."""

from __future__ import annotations

import time

import dramatiq
from counting import count, jobs, record, report, url
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=url()))


@dramatiq.actor(queue_name="noop")
def noop(i: int) -> None:
    record(i)


@dramatiq.actor(queue_name="noop")
def io(i: int, ms: float) -> None:
    time.sleep(ms / 1000)
    record(i)


@dramatiq.actor(queue_name="noop")
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    actors = {"noop": noop, "io": io, "send_email": send_email}
    todo = jobs(kind, 0, n)
    t0 = time.perf_counter()
    for name, args in todo:  # no bulk API: send() in a loop
        actors[name].send(*args)
    report(time.perf_counter() - t0, n)
