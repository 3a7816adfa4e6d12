"""Celery's side: ``celery -A celery_tasks worker -c 2 --prefetch-multiplier 16 -Q noop
--without-gossip --without-mingle`` runs it (prefork pool, Redis broker)."""

from __future__ import annotations

import time

from celery import Celery
from counting import record, report, url

app = Celery("peerbench", broker=url())
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True


@app.task(name="noop", queue="noop")
def noop(i: int) -> None:
    record(i)


def enqueue(n: int) -> None:
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:  # one connection for the whole loop
        for i in range(n):
            noop.apply_async((i,), producer=producer)
    report(time.perf_counter() - t0, n)
