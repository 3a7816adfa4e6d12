"""The worker side of the test mode (``app.stub()``, ``app.eager()``): jobs kept in
memory run through a worker's own runner, in-process (:mod:`fastq.testmode.worker`).

It ranks with the runners, above the app: the app loads it by name when a test
mode starts (``fastq.app.TEST_WORKER``), so that ``import fastq`` loads no runner.
"""

from fastq.testmode.worker import TestWorker

__all__ = ["TestWorker"]
