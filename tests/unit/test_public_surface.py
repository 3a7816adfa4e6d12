"""What users import and call stays what it was: the names ``fastq`` exports, the
App's methods and their parameters, and the enqueue options every enqueue path
takes (declared once, as :class:`fastq.options.EnqueueOptions`)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, get_type_hints

import pytest

import fastq
from fastq.options import (
    EnqueueKeywords,
    EnqueueManyKeywords,
    EnqueueOptions,
    JobKeywords,
    JobOptions,
)

EXPORTS = {
    "ACCELERATED",
    "App",
    "Backoff",
    "Batch",
    "BatchClosed",
    "BatchStatus",
    "BoundedDoubling",
    "Cancelled",
    "ChainStatus",
    "LinkStatus",
    "Step",
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
    "NoResult",
    "NotReplicated",
    "Polynomial",
    "RedisRefused",
    "RedisUnavailable",
    "ResultNotSerializable",
    "ResultTimeout",
    "Retry",
    "ShardCountMismatch",
    "TagPage",
    "TaggedJob",
    "UnknownQueue",
    "__version__",
    "current_job",
}

OPTIONS = [f.name for f in dataclasses.fields(EnqueueOptions)]
# each public method of App and its parameters (an enqueue's options as **options)
APP_METHODS = {
    "after_ack": ["client", "queue", "ack_reply", "who"],
    "after_job": ["fn"],
    "before_job": ["fn"],
    "batch": ["on_complete", "on_success", "description", "meta", "id", "close"],
    "batch_status": ["batch_id"],
    "broken_jobs": ["queue", "limit"],
    "cancel": ["job_id", "queue"],
    "cancel_batch": ["batch_id"],
    "chain": ["steps", "pass_results", "id"],
    "chain_status": ["chain_id"],
    "close_batch": ["batch_id"],
    "list_batches": ["limit"],
    "cancel_by_tag": ["tag", "queue"],
    "close": [],
    "configure": ["redis_url", "namespace"],
    "dead_jobs": ["queue", "limit"],
    "declare_queue": ["queues", "shards"],
    "enqueue": ["name", "args", "kwargs", "options"],
    "enqueue_many": ["name", "calls", "job_ids", "options"],
    "get_job": ["job_id", "queue"],
    "history": ["queue", "window_s"],
    "holders": ["queue"],
    "job": ["fn", "options"],
    "job_queues": [],
    "jobs_by_tag": ["tag", "queue", "cursor", "count"],
    "keep_records": ["queue", "max_age_s", "max_len"],
    "keys": ["queue"],
    "new_client": ["retries", "socket_timeout_s", "connect_timeout_s"],
    "on_failure": ["fn"],
    "on_worker_start": ["fn"],
    "on_worker_stop": ["fn"],
    "pause": ["queue"],
    "periodic": ["every_s", "cron", "tz", "overlap", "args", "kwargs", "job_options"],
    "physical_queues": ["queues"],
    "physical_queues_on": ["client", "queues"],
    "purge": ["queue", "ready", "scheduled", "dead", "broken"],
    "queues": [],
    "queues_on": ["client"],
    "recent_jobs": ["queue", "state", "limit"],
    "waiting_jobs": ["queue", "state", "offset", "limit"],
    "workers": ["queue"],
    "delete_job": ["job_id", "queue"],
    "stub": [],
    "eager": [],
    "rate_limit": ["queue"],
    "key_rate_limits": [],
    "circuits": [],
    "groups": ["queue"],
    "pause_group": ["queue", "group"],
    "resume_group": ["queue", "group"],
    "paused_groups": ["queue"],
    "set_key_rate_limit": ["key", "rate", "per_s", "burst"],
    "result": ["job_id", "timeout_s", "queue"],
    "resume": ["queue"],
    "retry_broken": ["queue", "limit"],
    "retry_dead": ["queue", "limit"],
    "retry_job": ["job_id", "queue"],
    "set_rate_limit": ["queue", "rate", "per_s", "burst"],
    "shards": ["queue"],
    "stats": ["queue"],
    "stats_on": ["client", "queue"],
    "submit": ["name", "args", "kwargs", "options"],
    "submit_many": ["name", "calls", "options", "job_ids"],
}
APP_PROPERTIES = {"cluster", "max_payload_bytes", "namespace", "redis", "redis_url", "shard_counts"}
APP_ATTRIBUTES = {
    "admin",
    "batch_book",
    "chain_book",
    "dead_max_age_ms",
    "dead_max_len",
    "hooks",
    "job_admin",
    "max_stalls",
    "min_replicas",
    "producer",
    "registry",
    "replica_timeout_s",
    "schedules",
    "store",
    "unknown_job_grace_s",
}


def test_fastq_exports_what_it_did() -> None:
    assert set(fastq.__all__) == EXPORTS
    assert all(hasattr(fastq, name) for name in EXPORTS)


def test_the_app_has_its_methods_with_their_parameters() -> None:
    public = {n for n in dir(fastq.App) if not n.startswith("_")}
    assert public == set(APP_METHODS) | APP_PROPERTIES
    for name, params in APP_METHODS.items():
        signature = inspect.signature(getattr(fastq.App, name))
        assert [p for p in signature.parameters if p != "self"] == params, name


def test_an_app_holds_its_settings_its_producer_and_its_admin() -> None:
    app = fastq.App("redis://127.0.0.1:1/0", namespace="n")
    assert {n for n in vars(app) if not n.startswith("_")} == APP_ATTRIBUTES
    assert app.producer.store is app.store and app.admin.store is app.store
    assert app.namespace == "n" and app.redis_url == "redis://127.0.0.1:1/0"


def _hints(typed_dict: Any) -> dict[str, Any]:
    return get_type_hints(typed_dict, globalns=vars(__import__("fastq.options").options))


def test_the_typed_keywords_are_the_enqueue_options() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(EnqueueOptions)}
    assert set(EnqueueKeywords.__optional_keys__) == set(fields)
    assert set(EnqueueManyKeywords.__optional_keys__) == set(fields) - {"job_id"}
    hints = _hints(EnqueueKeywords)
    dataclass_hints = get_type_hints(EnqueueOptions)
    assert {name: hints[name] for name in fields} == {n: dataclass_hints[n] for n in fields}


def test_the_typed_keywords_of_app_job_are_its_options() -> None:
    fields = [f.name for f in dataclasses.fields(JobOptions) if f.init]
    assert list(JobKeywords.__annotations__) == fields
    hints, dataclass_hints = _hints(JobKeywords), get_type_hints(JobOptions)
    assert {name: hints[name] for name in fields} == {n: dataclass_hints[n] for n in fields}


@pytest.mark.parametrize(
    "call",
    [
        lambda app: app.enqueue("job", dealy_s=1),
        lambda app: app.job(lambda: None).enqueue_with(dealy_s=1),
        lambda app: app.job(lambda: None, name="j2").enqueue_many([()], dealy_s=1),
        lambda app: app.job(retires=3),
        lambda app: app.periodic(every_s=60, retires=3)(lambda: None),
    ],
)
def test_a_misspelt_option_is_refused_with_the_options_named(call: Any) -> None:
    app = fastq.App("redis://127.0.0.1:1/0")
    with pytest.raises(
        TypeError, match=r"unexpected keyword argument .*\(its options: (delay_s|name, queue)"
    ):
        call(app)


def test_enqueue_many_names_job_ids_for_a_job_id() -> None:
    app = fastq.App("redis://127.0.0.1:1/0")
    with pytest.raises(TypeError, match=r"takes job_ids=\[...\], one per call, not job_id"):
        app.enqueue_many("job", [()], job_id="x")  # type: ignore[call-arg]
