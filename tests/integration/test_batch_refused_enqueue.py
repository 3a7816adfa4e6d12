"""An enqueue into a batch that was closed or ended after this process joined it
(another process closed or cancelled it) is refused by the enqueue script; the
producer raises what a refused join raises, ``fastq.BatchClosed``, and nothing goes
in (not a raw redis ``ResponseError``, which ``fastq serve`` would answer with a 500)."""

from __future__ import annotations

import pytest

import fastq


@pytest.mark.parametrize(("how", "state"), [("close", "closed"), ("cancel", "ended")])
def test_an_enqueue_into_a_batch_closed_since_it_joined_raises_batch_closed(
    app: fastq.App, how: str, state: str
) -> None:
    app.declare_queue("q")
    with app.batch(close=False) as batch:
        app.enqueue("j", args=[0], queue="q")  # joins the batch on q
        # as another process would; a cancel of a batch whose one job waits ends it
        if how == "close":
            app.close_batch(batch.id)
        else:
            assert app.cancel_batch(batch.id) == 1
        for enqueue in (
            lambda: app.enqueue("j", args=[1], queue="q"),
            lambda: app.enqueue_many("j", [(2,), (3,)], queue="q"),
        ):
            with pytest.raises(fastq.BatchClosed) as refused:
                enqueue()
            assert (refused.value.batch_id, refused.value.state) == (batch.id, state)
            assert str(refused.value) == f"batch {batch.id!r} is {state}: no job joins it now"
    status = app.batch_status(batch.id)
    assert status is not None and status.total == 1 and app.stats("q")["enqueued"] == 1
