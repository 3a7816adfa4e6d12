"""An app in two versions, for rolling deploys: ``DEPLOY_VERSION=old`` (the
default) registers ``old_job`` only; ``new`` registers ``welcome`` too. Every run
is counted in the namespace's ``runs`` hash (``<name>-<i>`` -> runs)."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(queue="deploy")
def old_job(i: int) -> None:
    app.redis.hincrby(f"{app.namespace}:runs", f"old_job-{i}", 1)


if os.environ.get("DEPLOY_VERSION", "old") == "new":

    @app.job(queue="deploy")
    def welcome(i: int) -> None:
        app.redis.hincrby(f"{app.namespace}:runs", f"welcome-{i}", 1)
