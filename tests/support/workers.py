"""In-process burst workers: they drain the test's queues and stop."""

from __future__ import annotations

import threading
from typing import Any

import fastq
from fastq.worker.worker import Worker


def drain(app: fastq.App, queues: list[str], **options: Any) -> Worker:
    """Run an in-process burst worker until its queues are empty."""
    options.setdefault("burst", True)
    options.setdefault("handle_signals", False)
    worker = Worker(app, queues, **options)
    worker.run()
    return worker


def drain_in_thread(
    app: fastq.App, queues: list[str], **options: Any
) -> tuple[Worker, threading.Thread]:
    options.setdefault("burst", True)
    options.setdefault("handle_signals", False)
    worker = Worker(app, queues, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread
