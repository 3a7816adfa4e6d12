"""delete.lua: one dead or broken job removed for good, nothing else touched."""

from __future__ import annotations

import pytest
import redis
from test_scripts import ack, claim, enqueue, env

from fastq.protocol import records
from fastq.protocol.contracts import DELETE
from fastq.protocol.keys import QueueKeys
from fastq.protocol.outcomes import Outcomes


@pytest.fixture
def k(namespace: str) -> QueueKeys:
    return QueueKeys(namespace, "q")


def delete(r: redis.Redis, k: QueueKeys, job_id: str) -> bool:
    return DELETE.call(r, DELETE.keys_for(k), DELETE.argv(job_id))


def test_a_dead_job_goes_and_its_record_stays(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["d", "waiting"])
    claim(r, k, "w1", 1)
    ack(r, k, "w1", Outcomes(dead=[(b"d", env("d"))], failed=1))
    assert r.zscore(k.dead, "d") is not None
    assert delete(r, k, "d") is True
    assert (r.zscore(k.dead, "d"), r.hget(k.jobs, "d")) == (None, None)
    rec = records.read(r, k, "d")
    assert rec is not None and rec.outcome == "dead"  # the id stays idempotent
    assert r.hget(k.stats, "purged") == b"1"
    assert delete(r, k, "d") is False  # gone already: nothing counted twice
    assert r.hget(k.stats, "purged") == b"1"


def test_a_waiting_job_is_not_deleted(r: redis.Redis, k: QueueKeys) -> None:
    enqueue(r, k, ["a"])
    before = {key: r.dump(key) for key in r.scan_iter(match=f"{k.namespace}:*")}
    assert delete(r, k, "a") is False
    assert {key: r.dump(key) for key in r.scan_iter(match=f"{k.namespace}:*")} == before


def test_a_broken_job_goes_with_its_payload(r: redis.Redis, k: QueueKeys) -> None:
    r.hset(k.jobs, "b", b"not json")
    r.hset(k.broken, "b", "invalid JSON")
    assert delete(r, k, "b") is True
    assert (r.hget(k.jobs, "b"), r.hget(k.broken, "b")) == (None, None)


def test_a_call_without_one_id_is_refused(r: redis.Redis, k: QueueKeys) -> None:
    with pytest.raises(redis.ResponseError, match="delete: ARGV must be one job id"):
        DELETE.call(r, DELETE.keys_for(k), [])
