"""An app with periodic jobs for subprocess tests: each run of ``tick`` records its
slot (from its id) and when it started (Unix ms), in Redis."""

import os
import time

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


# on a queue of its own: a pool started without -q must serve it
@app.periodic(every_s=1, queue="ticks")
def tick() -> None:
    slot_ms = fastq.current_job().id.rsplit(":", 1)[1]
    app.redis.rpush(f"{app.namespace}:ticks", f"{slot_ms} {time.time() * 1000:.1f}")


@app.periodic(cron="30 2 * * *", tz="Europe/Berlin", queue="maint", overlap=True)
def vacuum() -> None:
    pass
