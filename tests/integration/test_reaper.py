"""The reaper's own bookkeeping on one Redis (its sweeps under faults are in
tests/fault: test_redis_down, test_cluster_leases)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import fastq
from fastq.reaper import reaper as reaper_module
from fastq.reaper.reaper import Reaper


def test_the_last_queue_list_stands_while_it_cannot_be_read(
    app: fastq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the list lives on one master: while that one does not answer,
    the queues on the others are swept all the same."""
    monkeypatch.setattr(reaper_module, "_QUEUES_REFRESH_S", 0.0)  # read at every sweep
    app.enqueue("send", queue="mail")
    client = app.new_client(retries=0)
    reaper = Reaper(app, handle_signals=False)
    reaper.sweep(client)
    assert reaper.queues(client) == ["mail"]

    def away(*args: Any, **kwargs: Any) -> list[str]:
        raise redis.ConnectionError("the master keeping the list does not answer")

    monkeypatch.setattr(app, "physical_queues_on", away)
    app.enqueue("send", queue="mail", delay_s=0.05)
    time.sleep(0.1)
    reaper.sweep(client)  # promotes the due job: "mail" is still swept
    stats = app.stats("mail")
    assert (stats["ready"], stats["scheduled"]) == (2, 0)
    with pytest.raises(redis.ConnectionError):  # no list read yet: nothing to sweep
        Reaper(app, handle_signals=False).sweep(client)
    client.close()
