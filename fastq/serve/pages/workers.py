"""The Workers page (every pool and lone worker, and what each child runs) and
the Periodic page (each periodic job's schedule, last and next run)."""

from __future__ import annotations

from starlette.requests import Request

from fastq.app import App
from fastq.serve.pages import models
from fastq.serve.pages.handler import Rendered


def workers(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "workers.html", {"page": "workers", "entries": app.workers()}


def workers_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "_workers.html", {"entries": app.workers()}


def periodic(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "periodic.html", {"page": "periodic", "rows": models.periodic_rows(app)}
