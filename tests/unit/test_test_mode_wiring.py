"""How the app reaches the test mode's worker: by name (``fastq.app.TEST_WORKER``),
the one module above it that it loads, checked here since test_layers reads
imports only."""

from __future__ import annotations

import importlib
from typing import Optional

from fastq.app import TEST_WORKER
from fastq.producer.testmode import JobRunner
from fastq.testmode import TestWorker
from tests.unit.test_layers import RANKS, layer_of


def test_the_app_names_the_test_worker_and_it_ranks_above_the_app() -> None:
    module, name = TEST_WORKER
    assert getattr(importlib.import_module(module), name) is TestWorker
    # why it is named, not imported: an import would run up the layers
    assert RANKS[layer_of(module, RANKS)] > RANKS["app"]


def test_the_test_worker_is_what_a_test_mode_runs_jobs_with() -> None:
    import fastq

    app = fastq.App("redis://127.0.0.1:1/0")
    for mode in (app.stub, app.eager):
        with mode() as jobs:
            worker: Optional[JobRunner] = jobs.worker
            assert isinstance(worker, TestWorker)
            assert worker.runner.hooks is app.hooks  # the app's, read as jobs run
