"""A job's page (its arguments, error, progress, result, how it ended) and the
actions on a job: retry, cancel, delete (the last two confirmed first)."""

from __future__ import annotations

from typing import Optional

from starlette.requests import Request

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.serve.pages import models
from fastq.serve.pages.handler import Rendered, back, confirm, is_job_id
from fastq.serve.reply import HTTPError


def job_page(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id = str(request.path_params["job_id"])
    queue = request.query_params.get("queue") or None
    if not is_job_id(job_id) or (queue is not None and not valid_name(queue)):
        raise HTTPError(404, f"no job {job_id!r}")
    info = app.get_job(job_id, queue)
    if info is None:
        raise HTTPError(
            404, f"no job {job_id!r}: an unknown id, or a job that ended and whose record is gone"
        )
    kept, result = models.result_of(app, info)
    running = models.running_since(app, info.queue).get(job_id) if info.state == "active" else None
    return "job.html", {
        "page": "job",
        "job": info,
        "kept": kept,
        "result": result,
        "running": running,
        # in the dead set or the broken hash still (not a record's word alone)
        "retryable": info.state in ("dead", "broken") and bool(info.raw),
        "cancellable": info.state in ("queued", "scheduled", "active"),
    }


def _job_form(app: App, form: dict[str, str]) -> tuple[str, Optional[str]]:
    job_id, queue = form.get("id", ""), form.get("queue") or None
    if not is_job_id(job_id) or (queue is not None and not valid_name(queue)):
        raise HTTPError(422, f"no job {job_id!r}")
    return job_id, queue


def retry_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if not app.retry_job(job_id, queue):
        raise HTTPError(409, f"job {job_id} is neither dead nor broken: nothing retried")
    return back(request, form, f"job {job_id} is queued again")


def cancel_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if form.get("confirmed") != "1":
        return confirm(request, form, f"Cancel job {job_id}?", "Yes, cancel it")
    done = app.cancel(job_id, queue)
    if not done:
        raise HTTPError(409, f"job {job_id} has ended: only a job yet to end can be cancelled")
    return back(request, form, f"job {job_id} cancelled")


def delete_job(app: App, request: Request, form: dict[str, str]) -> Rendered:
    job_id, queue = _job_form(app, form)
    if form.get("confirmed") != "1":
        return confirm(request, form, f"Delete job {job_id} for good?", "Yes, delete it")
    if not app.delete_job(job_id, queue):
        raise HTTPError(409, f"job {job_id} is neither dead nor broken: nothing deleted")
    return back(request, form, f"job {job_id} deleted")
