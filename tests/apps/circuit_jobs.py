"""Jobs for the circuit breaker's pool test: ``send(host, i)`` fails while the flag
``{namespace}:down:{host}`` is set in Redis (an SMTP server that refuses
connections), and records every attempt in ``{namespace}:attempts``."""

from __future__ import annotations

import os

import fastq

app = fastq.App(os.environ.get("FASTQ_REDIS_URL", "redis://127.0.0.1:1/0"))


@app.job(
    queue="q",
    circuit_key="smtp:{host}",
    circuit_failures=5,
    circuit_open_s=0.5,
    retry_delays_s=[0.05],
)
def send(host: str, i: int) -> None:
    r = app.redis
    down = bool(r.exists(f"{app.namespace}:down:{host}"))
    r.rpush(f"{app.namespace}:attempts", f"{host} {i} {'fail' if down else 'ok'}")
    if down:
        raise ConnectionRefusedError(f"{host}: connection refused")
