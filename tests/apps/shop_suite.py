"""A user's own tests of tests/apps/shop.py, in fastq's test mode (run by
tests/integration/test_test_mode.py with pytest, as a user would: no Redis)."""

import pytest

from tests.apps import shop


@pytest.fixture(autouse=True)
def fresh() -> None:
    shop.SENT.clear()
    shop.STOCK.update(tea=2)


def test_an_order_enqueues_a_receipt_and_a_stock_update() -> None:
    with shop.app.stub() as jobs:
        shop.place_order(7, "a@example.com", "tea")
    assert jobs.names() == ["send_receipt", "take_stock"]
    assert (jobs[0].queue, jobs[0].args) == ("mail", [7, "a@example.com"])
    assert (jobs[1].args, jobs[1].kwargs) == (["tea"], {"n": 1})
    assert shop.SENT == []  # kept, not run
    assert jobs.run() == ["sent to a@example.com", 1]
    assert shop.SENT == [("a@example.com", "order 7")]


def test_eager_runs_the_jobs_and_those_they_enqueue() -> None:
    with shop.app.eager():
        shop.place_order(1, "b@example.com", "tea")
        shop.place_order(2, "c@example.com", "tea")  # stock 0: a restock runs too
    assert [email for email, _ in shop.SENT] == ["b@example.com", "c@example.com"]
    assert shop.STOCK["tea"] == 10


def test_arguments_are_checked_as_for_redis() -> None:
    with shop.app.stub() as jobs:
        with pytest.raises(TypeError, match="send_receipt"):
            shop.send_receipt.enqueue(7)  # a missing argument
        with pytest.raises(TypeError):
            shop.send_receipt.enqueue(8, {"a@example.com"})  # a set: JSON has none
    assert len(jobs) == 0
