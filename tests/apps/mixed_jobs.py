"""``thread_jobs`` and an ``async def`` job beside them: a mixed app for the pool
fault tests (``--async-jobs`` beside ``--threads``)."""

from __future__ import annotations

import asyncio

from tests.apps.thread_jobs import _record, app

__all__ = ["app"]


@app.job(queue="q", backoff_s=0.1)
async def awork(i: int, sleep_s: float = 0.0) -> None:
    """``work`` from an ``async def``."""
    _record(i)
    await asyncio.sleep(sleep_s)
