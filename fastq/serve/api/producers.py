"""The producer's routes: enqueue, read a job back, cancel it; the queues, their
stats, pause, resume and rate limit. Each runs in the thread pool
(:func:`fastq.serve.api.endpoint.endpoint`): fastq's calls block on Redis."""

from __future__ import annotations

import contextlib
from typing import Any, Optional

from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import Scope

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.errors import NoResult
from fastq.protocol.introspect import JobInfo
from fastq.serve.api.endpoint import endpoint, require_object
from fastq.serve.api.enqueue import parse_jobs, send
from fastq.serve.reply import HTTPError
from fastq.validate import check_job_id, check_queue_name

# what a job's reply holds, by the JobInfo attribute it comes from
JOB_ATTRIBUTES = (
    "id",
    "queue",
    "state",
    "name",
    "args",
    "kwargs",
    "attempts",
    "stalls",
    "enqueued_at",
    "due_at",
    "lease_until",
    "worker",
    "failed_at",
    "traceback",
    "broken_reason",
    "progress",
    "progress_meta",
    "tags",
    "cancelled_at",
    "ended_at",
    "run_ms",
)


def _path_queue(request: Request) -> str:
    queue = request.path_params["queue"]
    try:
        return check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


def _query_queue(request: Request) -> Optional[str]:
    """``?queue=``: the job's queue (without it every known queue is searched)."""
    queue = request.query_params.get("queue")
    if queue is None:
        return None
    try:
        return check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"queue: {exc}") from None


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    try:
        return check_job_id(job_id)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


def _known(app: App, queue: str) -> str:
    if queue not in app.queues():
        raise HTTPError(
            404,
            f"unknown queue {queue!r}: nothing was ever enqueued on it and no job of "
            "the server's app is registered on it",
        )
    return queue


def job_view(info: JobInfo) -> dict[str, Any]:
    """A job as the API shows it: JobInfo's attributes (times in Unix seconds),
    ``error`` its last error."""
    view = {name: getattr(info, name, None) for name in JOB_ATTRIBUTES}
    view["error"] = info.last_error
    view["tags"] = list(view["tags"] or ())
    return view


# -- jobs -------------------------------------------------------------------------


def enqueue(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/jobs: one job object or an array of them."""
    jobs = parse_jobs(app, body, _path_queue(request))
    return {"ids": send(app, jobs)}


def read_job(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/jobs/{id}: state, attempts, error, progress, and a done job's
    kept result (``result``, present only when the job keeps one)."""
    job_id, queue = _job_id(request), _query_queue(request)
    info = app.get_job(job_id, queue)
    if info is None:
        where = f" in queue {queue!r}" if queue else ""
        raise HTTPError(
            404,
            f"no job {job_id!r}{where}: an unknown id, or a job that ended and whose "
            "record is gone",
        )
    view = job_view(info)
    if info.state == "done":
        # no result_ttl_s, or it expired: no "result"
        with contextlib.suppress(NoResult):
            view["result"] = app.result(job_id, 0, queue=info.queue)
    return view


def cancel_job(app: App, request: Request, body: Any) -> Any:
    """DELETE /api/v1/jobs/{id}: cancel a job that has not ended."""
    job_id, queue = _job_id(request), _query_queue(request)
    done = app.cancel(job_id, queue)
    if done:
        return {"id": job_id, "stopped": done.stopped > 0, "held": done.held > 0}
    info = app.get_job(job_id, queue)
    if info is None:
        raise HTTPError(404, f"no job {job_id!r} to cancel: an unknown id, or its record is gone")
    raise HTTPError(
        409,
        f"job {job_id!r} is {info.state}: only a job yet to end can be cancelled",
        state=info.state,
    )


def job(app: App, request: Request, body: Any) -> Any:
    """GET or DELETE /api/v1/jobs/{id}."""
    return (
        cancel_job(app, request, body)
        if request.method == "DELETE"
        else read_job(app, request, body)
    )


# -- queues -----------------------------------------------------------------------


def list_queues(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/queues: every known queue with its stats."""
    names = [q for q in app.queues() if valid_name(q)]
    return {"queues": [{"name": q, "stats": app.stats(q)} for q in names]}


def queue_stats(app: App, request: Request, body: Any) -> Any:
    """GET /api/v1/queues/{queue}: one queue's stats."""
    queue = _known(app, _path_queue(request))
    return {"name": queue, "stats": app.stats(queue)}


def pause(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/pause."""
    queue = _known(app, _path_queue(request))
    app.pause(queue)
    return {"name": queue, "paused": True}


def resume(app: App, request: Request, body: Any) -> Any:
    """POST /api/v1/queues/{queue}/resume."""
    queue = _known(app, _path_queue(request))
    app.resume(queue)
    return {"name": queue, "paused": False}


RATE_FIELDS = ("rate", "per_s", "burst")


def set_rate_limit(app: App, request: Request, body: Any) -> Any:
    """PUT /api/v1/queues/{queue}/rate_limit: ``{"rate", "per_s", "burst"}``;
    ``"rate": null`` lifts the limit."""
    queue = _known(app, _path_queue(request))
    given = require_object(body, "rate_limit")
    unknown = [key for key in given if key not in RATE_FIELDS]
    if unknown:
        raise HTTPError(422, f"{unknown[0]}: unknown field (fields: {', '.join(RATE_FIELDS)})")
    if "rate" not in given:
        raise HTTPError(422, "rate: required (jobs per period; null lifts the limit)")
    per_s = given.get("per_s")
    app.set_rate_limit(
        queue, given["rate"], per_s=1.0 if per_s is None else per_s, burst=given.get("burst")
    )
    limit = app.rate_limit(queue)
    shown = None
    if limit is not None:
        shown = {"rate": limit.rate, "per_s": limit.period_ms / 1000, "burst": limit.burst}
    return {"name": queue, "rate_limit": shown}


class JobRoute(Route):
    """``/api/v1/jobs/{job_id:path}``: an id may hold a ``/`` (sent as ``%2F`` or
    not). A request of another method whose id holds one is no request of this
    route (a 404, not a 405): ``POST /api/v1/jobs/a/b/done`` is a worker route's
    path with an id ``a/b``, or nothing."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.PARTIAL and "/" in child["path_params"].get("job_id", ""):
            return Match.NONE, {}
        return match, child


ROUTES = [
    Route("/queues", endpoint(list_queues), methods=["GET"]),
    Route("/queues/{queue}", endpoint(queue_stats), methods=["GET"]),
    Route("/queues/{queue}/jobs", endpoint(enqueue), methods=["POST"]),
    Route("/queues/{queue}/pause", endpoint(pause), methods=["POST"]),
    Route("/queues/{queue}/resume", endpoint(resume), methods=["POST"]),
    Route("/queues/{queue}/rate_limit", endpoint(set_rate_limit), methods=["PUT"]),
    # one route of both methods: a 405's Allow names both
    JobRoute("/jobs/{job_id:path}", endpoint(job), methods=["GET", "DELETE"]),
]
