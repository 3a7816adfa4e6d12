"""fastq: a Redis-backed background job queue, built for throughput and for never
losing a job.

    app = fastq.App("redis://127.0.0.1:6379/0")

    @app.job(queue="mailer", retries=5)
    def send_email(to: str, subject: str) -> None: ...

    send_email.enqueue("a@example.com", "hi")
"""

from fastq._accel import ACCELERATED
from fastq._version import __version__
from fastq.app import App
from fastq.context import JobContext, current_job
from fastq.errors import (
    BatchClosed,
    EnqueueError,
    EnqueueInterrupted,
    Fail,
    FastqError,
    JobFailed,
    NoResult,
    NotReplicated,
    RedisRefused,
    RedisUnavailable,
    ResultNotSerializable,
    ResultTimeout,
    Retry,
    ShardCountMismatch,
    UnknownQueue,
)
from fastq.job import JobDef, Step
from fastq.policy import JobPolicy
from fastq.producer.batches import Batch
from fastq.producer.chains import ChainStatus, LinkStatus
from fastq.protocol.batches import BatchStatus
from fastq.protocol.cancel import Cancelled
from fastq.protocol.introspect import JobInfo, TaggedJob, TagPage
from fastq.retry import Backoff, BoundedDoubling, Delays, Exponential, Geometric, Polynomial

__all__ = [
    "ACCELERATED",
    "App",
    "Batch",
    "Backoff",
    "BatchClosed",
    "BatchStatus",
    "ChainStatus",
    "BoundedDoubling",
    "Cancelled",
    "Delays",
    "EnqueueError",
    "EnqueueInterrupted",
    "Exponential",
    "Fail",
    "FastqError",
    "Geometric",
    "JobContext",
    "JobDef",
    "JobFailed",
    "JobInfo",
    "JobPolicy",
    "LinkStatus",
    "NoResult",
    "NotReplicated",
    "Polynomial",
    "RedisRefused",
    "RedisUnavailable",
    "ResultNotSerializable",
    "ResultTimeout",
    "Retry",
    "Step",
    "ShardCountMismatch",
    "TagPage",
    "TaggedJob",
    "UnknownQueue",
    "__version__",
    "current_job",
]
