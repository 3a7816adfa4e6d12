"""Celery's side: ``celery -A celery_tasks worker -c 2 --prefetch-multiplier 16 -Q noop
--without-gossip --without-mingle`` runs it (prefork pool, Redis broker)."""

from __future__ import annotations

import time

from celery import Celery
from counting import count, jobs, record, report, url

app = Celery("peerbench", broker=url())
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True


@app.task(name="noop", queue="noop")
def noop(i: int) -> None:
    record(i)


@app.task(name="io", queue="noop")
def io(i: int, ms: float) -> None:
    time.sleep(ms / 1000)
    record(i)


@app.task(name="send_email", queue="noop")
def send_email(to: str, subject: str, n: int) -> None:
    count()


def enqueue(n: int, kind: str = "noop") -> None:
    tasks = {"noop": noop, "io": io, "send_email": send_email}
    todo = jobs(kind, 0, n)
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:  # one connection for the whole loop
        for name, args in todo:
            tasks[name].apply_async(args, producer=producer)
    report(time.perf_counter() - t0, n)
