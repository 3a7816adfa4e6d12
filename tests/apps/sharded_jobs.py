"""An app with a sharded queue, for the CLI tests: ``mailer`` over four shards;
``send`` counts its runs in Redis."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="mailer", shards=4)
def send(i: int) -> None:
    app.redis.hincrby(f"{app.namespace}:runs", str(i), 1)
