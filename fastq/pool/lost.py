"""The master's look at whether Redis lost its data (:mod:`fastq.monitor.losses`),
from a thread of its own: the supervision loop never waits on Redis."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from fastq.monitor.losses import LossWatch, LossWatchThread, named
from fastq.pool.handback import HandBacks

if TYPE_CHECKING:
    from fastq.app import App

log = logging.getLogger("fastq.master")


def watch_for_loss(
    app: Callable[[], App], queues: Callable[[], list[str]], pid: int, hand_backs: HandBacks
) -> LossWatchThread:
    """Start looking at the markers of the pool's queues (``queues()``, every shard
    of each; ``app()``: the app, which a HUP may reload), with the hand-backs'
    client settings and under their fork gate (a child forked while this thread
    logs would inherit the log's lock held). The first look is made before this
    returns, before any child is forked."""
    watch = LossWatch(app().namespace, f"master {pid}", log, lost_what=_pool_queues)
    thread = LossWatchThread(
        watch,
        hand_backs.connect,
        lambda client: app().physical_queues_on(client, queues()),
        hand_backs.fork_gate,
    )
    thread.start()
    return thread


def _pool_queues(lost: list[str]) -> str:
    return f"the jobs of this pool's queues {named(lost)} no longer exist"
