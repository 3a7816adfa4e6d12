"""The Queues page (every queue, its counts and chart), a queue's page (its jobs by
state, search by id or tag) and the actions on a queue: pause, resume, rate limit,
purge (confirmed first)."""

from __future__ import annotations

from typing import Any, Optional

from starlette.requests import Request
from starlette.responses import RedirectResponse

from fastq.admin.sharded import valid_name
from fastq.app import App
from fastq.serve.pages import models
from fastq.serve.pages.handler import Rendered, back, confirm, is_job_id, render, url_for
from fastq.serve.reply import HTTPError, JSONReply, error_reply


def overview(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "overview.html", {"queues": models.queue_rows(app), "page": "overview"}


def overview_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "_queues.html", {"queues": models.queue_rows(app)}


def history(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = request.query_params.get("queue") or None
    try:
        window_s = int(request.query_params.get("window_s", "3600"))
    except ValueError:
        window_s = 3600
    try:
        return JSONReply(models.history_series(app, queue, window_s))
    except ValueError as exc:
        return error_reply(422, str(exc))


def _queue(app: App, request: Request) -> str:
    queue = str(request.path_params["queue"])
    if not valid_name(queue) or queue not in app.queues():
        raise HTTPError(404, f"no queue {queue!r} in namespace {app.namespace}")
    return queue


def _page_number(request: Request) -> int:
    text = request.query_params.get("page", "0")
    # ASCII digits only ('²'.isdigit() is true, and int() refuses it), and few of them
    return min(int(text), 10_000) if text.isascii() and text.isdigit() and len(text) < 10 else 0


def queue_page(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    params = request.query_params
    job_id = params.get("id", "").strip()
    if job_id:  # the search by id: straight to the job's page, if the queue has it
        if is_job_id(job_id) and app.get_job(job_id, queue) is not None:
            return RedirectResponse(url_for(request, "job_page", job_id=job_id, queue=queue), 303)
        return render(
            request,
            "queue.html",
            {**_queue_context(app, queue, "queued", 0), "error": f"no job {job_id!r} in {queue}"},
        )
    tag = params.get("tag", "").strip()
    if tag:
        return "queue.html", {**_queue_context(app, queue, None, 0), **_tagged(app, queue, params)}
    state = params.get("state", "queued")
    if state not in [s for s, _, _ in models.STATES]:
        state = "queued"
    return "queue.html", _queue_context(app, queue, state, _page_number(request))


def _queue_context(app: App, queue: str, state: Optional[str], number: int) -> dict[str, Any]:
    stats = app.stats(queue)
    jobs, more = models.queue_jobs(app, queue, state, number) if state else ([], False)
    paused_groups = app.paused_groups(queue)
    depths = app.groups(queue)
    # the groups served next first, the paused ones after; at most GROUPS_SHOWN
    groups = [(g, n, g in paused_groups) for g, n in depths.items() if g not in paused_groups]
    groups += [(g, depths.get(g, 0), True) for g in paused_groups]
    return {
        "groups": groups[:GROUPS_SHOWN],
        "groups_more": max(0, len(groups) - GROUPS_SHOWN),
        "page": "queue",
        "queue": queue,
        "stats": stats,
        "rate": models.rate_text(stats),
        "states": models.STATES,
        "state": state,
        "jobs": jobs,
        "number": number,
        "more": more,
        "workers": sum(
            1
            for e in app.workers(queue)
            for c in e.get("children", ())
            if c.get("kind") == "worker"
        ),
    }


# groups listed on a queue's page at most (app.groups and fastq groups list them all)
GROUPS_SHOWN = 50


def pause_group(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return _switch_group(app, request, form, paused=True)


def resume_group(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return _switch_group(app, request, form, paused=False)


def _switch_group(app: App, request: Request, form: dict[str, str], paused: bool) -> Rendered:
    """Pause or resume the form's group of the page's queue."""
    queue, group = _queue(app, request), form.get("group", "")
    try:
        (app.pause_group if paused else app.resume_group)(queue, group)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"group not {'paused' if paused else 'resumed'}: {exc}") from None
    if paused:
        return back(request, form, f"paused group {group} of {queue}: its jobs wait")
    return back(request, form, f"resumed group {group} of {queue}")


def _tagged(app: App, queue: str, params: Any) -> dict[str, Any]:
    tag = params.get("tag", "").strip()
    try:
        found = app.jobs_by_tag(tag, queue, params.get("cursor") or None, models.PAGE_SIZE)
    except ValueError as exc:
        return {"tag": tag, "tagged": [], "cursor": None, "error": str(exc)}
    return {"tag": tag, "tagged": found.jobs, "cursor": found.cursor}


def queue_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    stats = app.stats(queue)
    return "_queue_counts.html", {"queue": queue, "stats": stats, "rate": models.rate_text(stats)}


def pause(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    app.pause(queue)
    return back(request, form, f"paused {queue}: workers claim none of its jobs until resumed")


def resume(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    app.resume(queue)
    return back(request, form, f"resumed {queue}")


def rate_limit(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    rate_text, per_text, burst_text = (form.get(f, "").strip() for f in ("rate", "per_s", "burst"))
    try:
        rate = int(rate_text) if rate_text else None
        per_s = float(per_text) if per_text else 1.0
        burst = int(burst_text) if burst_text else None
        app.set_rate_limit(queue, rate, per_s=per_s, burst=burst)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"rate limit not set: {exc}") from None
    limit = app.rate_limit(queue)
    return back(request, form, f"rate limit of {queue}: {limit if limit else 'none'}")


PURGEABLE = ("ready", "scheduled", "dead", "broken")


def purge(app: App, request: Request, form: dict[str, str]) -> Rendered:
    queue = _queue(app, request)
    chosen = {what: form.get(what) == "1" for what in PURGEABLE}
    if not any(chosen.values()):
        raise HTTPError(422, "purge: choose what to delete (ready, scheduled, dead, broken)")
    named = ", ".join(what for what, on in chosen.items() if on)
    if form.get("confirmed") != "1":
        return confirm(
            request,
            form,
            f"Delete every {named} job of queue {queue}, for good?",
            f"Yes, purge {queue}",
        )
    n = app.purge(queue, **chosen)
    return back(request, form, f"purged {n} jobs ({named}) from {queue}")
