"""A periodic job for the clock tests: each run records its slot (from its id) and
Redis' clock when it started, so that a test can tell whether every slot ran once
and on time whatever the clock of the processes that fired and ran it."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.periodic(every_s=1, queue="ticks")
def tick() -> None:
    seconds, micros = app.redis.time()
    slot_ms = fastq.current_job().id.rsplit(":", 1)[1]
    app.redis.rpush(f"{app.namespace}:ticks", f"{slot_ms} {seconds * 1000 + micros // 1000}")
