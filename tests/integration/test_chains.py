"""Chains with real workers: links run in order, each once, with the arguments known
when the chain was made or the return value of the link before; a link that dies
stops the chain, and its status names it; a reaper forwards what a worker did not."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fastq
from fastq.protocol.contracts import ACK, CLAIM
from fastq.protocol.outcomes import Outcomes
from fastq.reaper.reaper import Reaper
from tests.support.pool import wait_until
from tests.support.workers import drain


def run_links(app: fastq.App, queues: list[str], chain_id: str, n: int = 10) -> fastq.ChainStatus:
    """Burst workers, one after the other, until the chain is no longer running."""
    for _ in range(n):
        drain(app, queues)
        status = app.chain_status(chain_id)
        assert status is not None
        if status.state != "running":
            return status
    raise AssertionError(f"chain {chain_id} still running: {app.chain_status(chain_id)}")


@pytest.fixture
def calls(app: fastq.App, r: redis.Redis) -> list[Any]:
    """Each run of the jobs below, in order: (name, args)."""
    runs: list[Any] = []

    @app.job(queue="q", result_ttl_s=60)
    def fetch(url: str) -> dict[str, Any]:
        runs.append(("fetch", url))
        return {"url": url, "size": 3}

    @app.job(queue="q2", result_ttl_s=60)
    def parse(page: dict[str, Any], scale: int = 1) -> int:
        runs.append(("parse", page, scale))
        return int(page["size"]) * scale

    @app.job(queue="q")
    def store(total: int, label: str) -> None:
        runs.append(("store", total, label))

    @app.job(queue="q", retries=0)
    def explode(x: int) -> None:
        runs.append(("explode", x))
        raise RuntimeError(f"no {x}")

    @app.job(queue="q")
    def note(x: Any) -> None:
        runs.append(("note", x))

    return runs


def test_three_links_run_in_order_each_given_the_value_of_the_one_before(
    app: fastq.App, calls: list[Any]
) -> None:
    fetch, parse, store = (app.registry[n] for n in ("fetch", "parse", "store"))
    chain_id = app.chain(
        fetch.step("https://x"),
        parse.step(scale=10).options(queue="q2"),
        store.step("total"),
        pass_results=True,
    )
    status = run_links(app, ["q", "q2"], chain_id)
    assert calls == [
        ("fetch", "https://x"),
        ("parse", {"url": "https://x", "size": 3}, 10),
        ("store", 30, "total"),
    ]
    assert status.state == "done" and status.failed_link is None
    assert [(s.index, s.name, s.id, s.queue, s.state) for s in status.links] == [
        (1, "fetch", chain_id, "q", "done"),
        (2, "parse", f"{chain_id}.2", "q2", "done"),
        (3, "store", f"{chain_id}.3", "q", "done"),
    ]
    assert app.stats("q")["enqueued"] == 2 and app.stats("q2")["enqueued"] == 1


def test_links_with_the_arguments_known_when_the_chain_was_made(
    app: fastq.App, calls: list[Any]
) -> None:
    note = app.registry["note"]
    chain_id = app.chain(note.step(1), note.step(2), note.step(3), id="by-hand")
    assert chain_id == "by-hand"
    assert run_links(app, ["q"], chain_id).state == "done"
    assert calls == [("note", 1), ("note", 2), ("note", 3)]
    # the same id again adds nothing: its links' records last
    assert app.chain(note.step(1), note.step(2), note.step(3), id="by-hand") == "by-hand"
    drain(app, ["q"])
    assert len(calls) == 3


def test_a_link_that_dies_stops_the_chain_and_its_status_names_it(
    app: fastq.App, calls: list[Any]
) -> None:
    note, explode = app.registry["note"], app.registry["explode"]
    chain_id = app.chain(note.step(1), explode.step(7), note.step(3))
    status = run_links(app, ["q"], chain_id)
    assert calls == [("note", 1), ("explode", 7)]
    assert status.state == "failed"
    assert status.failed_link is not None
    assert (status.failed_link.index, status.failed_link.name) == (2, "explode")
    assert status.error == "link 2 (explode) died: RuntimeError: no 7"
    assert [s.state for s in status.links] == ["done", "dead", None]
    k = app.keys("q")
    assert app.redis.exists(k.chained, k.chain_out) == 0  # nothing left behind


def test_a_cancelled_link_stops_the_chain(app: fastq.App, calls: list[Any]) -> None:
    note = app.registry["note"]
    chain_id = app.chain(note.step(1), note.step(2))
    app.cancel(chain_id, queue="q")
    status = app.chain_status(chain_id)
    assert status is not None and status.state == "failed"
    assert status.error == "link 1 (note) was cancelled"
    drain(app, ["q"])
    assert calls == [] and app.redis.exists(app.keys("q").chained) == 0


def test_what_a_chain_refuses_before_anything_is_sent(app: fastq.App, calls: list[Any]) -> None:
    note, store, fetch = (app.registry[n] for n in ("note", "store", "fetch"))
    with pytest.raises(TypeError):  # store takes (total, label): label missing
        app.chain(fetch.step("u"), store.step(), pass_results=True)
    with pytest.raises(ValueError, match=r"step 2 \(note\) takes the return value of step 1 "):
        app.chain(note.step(1), note.step().options(pass_result=True))
    with pytest.raises(TypeError, match="a step takes the options queue, priority"):
        note.step(1).options(delay_s=3)
    with pytest.raises(ValueError, match="a chain cannot join a batch"), app.batch():
        app.chain(note.step(1), note.step(2))
    with app.eager(), pytest.raises(ValueError, match=r"app.chain needs Redis: inside app.stub"):
        app.chain(note.step(1), note.step(2))
    assert app.stats("q")["enqueued"] == 0


def test_a_reaper_forwards_the_link_whose_worker_died_after_its_ack(
    app: fastq.App, r: redis.Redis, calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack is sent by hand, as a worker killed before it forwarded leaves it."""
    monkeypatch.setattr("fastq.protocol.chains.GRACE_MS", 0)
    note = app.registry["note"]
    chain_id = app.chain(note.step(1), note.step(2))
    k = app.keys("q")
    claimed = CLAIM.call(r, CLAIM.keys_for(k, "w-gone"), CLAIM.argv("w-gone", 1, 60_000, 100))
    assert claimed.ids == [chain_id.encode()]
    ACK.call(r, ACK.keys_for(k, "w-gone"), Outcomes(done=claimed.ids).ack_argv(10**9, 1000, "w"))
    assert r.hlen(k.chain_out) == 1 and app.stats("q")["ready"] == 0
    reaper = Reaper(app, ["q"], interval_s=0.05, handle_signals=False)
    client = app.new_client(retries=0)
    reaper.settle_batches(client)
    wait_until(lambda: app.stats("q")["ready"] == 1, 5, "the next link forwarded")
    assert r.exists(k.chain_out) == 0
    assert run_links(app, ["q"], chain_id).state == "done"
    assert calls == [("note", 2)]


def test_a_chain_across_queues_of_a_cluster(capp: fastq.App) -> None:
    """Links on queues in other slots (often other masters), the chain's own key in
    a slot of its own: forwarded, and read back, as on one Redis."""
    runs: list[Any] = []

    @capp.job(queue="east", result_ttl_s=60)
    def start(x: int) -> int:
        runs.append(("start", x))
        return x + 1

    @capp.job(queue="west", result_ttl_s=60)
    def double(x: int) -> int:
        runs.append(("double", x))
        return x * 2

    chain_id = capp.chain(start.step(1), double.step(), start.step(), pass_results=True)
    status = run_links(capp, ["east", "west"], chain_id)
    assert status.state == "done"
    assert runs == [("start", 1), ("double", 2), ("start", 4)]
    assert capp.result(f"{chain_id}.3") == 5


def test_a_value_gone_before_its_link_is_forwarded_stops_the_chain_and_says_so(
    app: fastq.App, r: redis.Redis, calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fastq.protocol.chains.GRACE_MS", 0)
    fetch, parse = app.registry["fetch"], app.registry["parse"]
    chain_id = app.chain(fetch.step("u"), parse.step(), pass_results=True)
    k = app.keys("q")
    claimed = CLAIM.call(r, CLAIM.keys_for(k, "w-gone"), CLAIM.argv("w-gone", 1, 60_000, 100))
    # acked with no value kept (as if it expired before the forward)
    ACK.call(r, ACK.keys_for(k, "w-gone"), Outcomes(done=claimed.ids).ack_argv(10**9, 1000, "w"))
    assert app.chain_book.resume(app.new_client(retries=0), ["q"]) == 0
    assert r.exists(k.chain_out) == 0 and app.stats("q2")["enqueued"] == 0
    status = app.chain_status(chain_id)
    assert status is not None and status.state == "failed"
    assert status.failed_link is not None and status.failed_link.index == 2
    assert status.error == (
        f"link 2 (parse) was not enqueued: the return value of the link before ({chain_id}) is gone"
    )


def test_an_outbox_entry_that_cannot_be_read_is_dropped_and_said(
    app: fastq.App, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    k = app.keys("q")
    r.hset(k.chain_out, mapping={"bad1": b"0 not json", "bad2": b"0 []", "bad3": b'0 [{"q": 1}]'})
    assert app.chain_book.forward(app.redis, "q", ["bad1", "bad2", "bad3"]) == 0
    assert r.exists(k.chain_out) == 0
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "fastq.chains"]
    assert len(lines) == 3 and all("the chain stops there" in line for line in lines)


def test_a_chain_on_a_sharded_queue_goes_to_each_links_own_shard(
    app: fastq.App, calls: list[Any]
) -> None:
    app.declare_queue("sq", shards=3)
    note = app.registry["note"]
    steps = [note.step(i).options(queue="sq") for i in (1, 2, 3)]
    chain_id = app.chain(*steps, id="sharded")
    status = run_links(app, ["sq"], chain_id)
    assert status.state == "done" and calls == [("note", 1), ("note", 2), ("note", 3)]
    shards = {"sq", "sq#1", "sq#2"}
    assert {link.queue for link in status.links} <= shards
    for link in status.links:  # the shard fastq's producers route the id to
        assert app.get_job(link.id, queue="sq") is not None
