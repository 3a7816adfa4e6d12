"""A user's app for the test-mode tests: placing an order enqueues a receipt and a
stock update, and the stock update enqueues a restock when stock runs low."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))
SENT: list[tuple[str, str]] = []
STOCK = {"tea": 2}


@app.job(queue="mail")
def send_receipt(order_id: int, email: str) -> str:
    SENT.append((email, f"order {order_id}"))
    return f"sent to {email}"


@app.job(queue="stock")
async def take_stock(item: str, n: int = 1) -> int:
    STOCK[item] -= n
    if STOCK[item] < 1:
        restock.enqueue(item)
    return STOCK[item]


@app.job(queue="stock")
def restock(item: str) -> None:
    STOCK[item] += 10


def place_order(order_id: int, email: str, item: str) -> None:
    """The code under test: what a web view would call."""
    send_receipt.enqueue(order_id, email)
    take_stock.enqueue(item, n=1)
