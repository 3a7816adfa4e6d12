"""An app module that registers no jobs (its @app.job modules were never imported)."""

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))
