"""The dashboard's batch pages: the latest batches with their progress, and one
batch (its counts, times, queues, child batches, callbacks) with its Close and
Cancel buttons; both poll a fragment of their own every few seconds.

Every page and action goes through :func:`fastq.serve.pages.handler.page` (the session,
the read-only switch, the CSRF token); an action calls what ``fastq batch close``
and ``fastq batch cancel`` call, and a cancel asks first, as a job's does.
"""

from __future__ import annotations

from typing import Any, Optional

from starlette.requests import Request

from fastq.app import App
from fastq.errors import BatchClosed
from fastq.protocol.batches import BatchStatus
from fastq.serve.pages.handler import Rendered, back, confirm, is_job_id
from fastq.serve.reply import HTTPError
from fastq.validate import SHARD_SEP

# batches the list shows (the newest): each is read whole, every 5 s an open tab polls
LISTED = 50


def progress(status: BatchStatus) -> dict[str, Any]:
    """A batch's row: its status, and the percentages of its total that ended done,
    dead and cancelled (the bar's parts)."""
    total = status.total

    def share(n: int) -> float:
        return round(100 * n / total, 2) if total else 0.0

    return {
        "s": status,
        "done_pct": share(status.done),
        "dead_pct": share(status.dead),
        "cancelled_pct": share(status.cancelled),
        "ended": status.done + status.dead + status.cancelled,
        # its shares are per physical queue: a sharded queue's page is its name's
        "queues": sorted({q.split(SHARD_SEP, 1)[0] for q in status.queues}),
    }


def _batch(app: App, batch_id: str) -> BatchStatus:
    status: Optional[BatchStatus] = app.batch_status(batch_id) if is_job_id(batch_id) else None
    if status is None:
        raise HTTPError(
            404,
            f"no batch {batch_id!r}: never opened, or it expired (a batch is kept 7 days "
            "after it ended)",
        )
    return status


def batches(app: App, request: Request, form: dict[str, str]) -> Rendered:
    rows = [progress(s) for s in app.list_batches(LISTED)]
    return "batches.html", {"page": "batches", "rows": rows}


def batches_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    return "_batches.html", {"rows": [progress(s) for s in app.list_batches(LISTED)]}


def batch_page(app: App, request: Request, form: dict[str, str]) -> Rendered:
    status = _batch(app, str(request.path_params["batch_id"]))
    return "batch.html", {"page": "batches", "b": progress(status)}


def batch_fragment(app: App, request: Request, form: dict[str, str]) -> Rendered:
    status = _batch(app, str(request.path_params["batch_id"]))
    return "_batch.html", {"b": progress(status)}


def _form_batch(form: dict[str, str]) -> str:
    batch_id = form.get("id", "")
    if not is_job_id(batch_id):
        raise HTTPError(422, f"no batch {batch_id!r}")
    return batch_id


def cancel_batch(app: App, request: Request, form: dict[str, str]) -> Rendered:
    batch_id = _form_batch(form)
    if form.get("confirmed") != "1":
        return confirm(
            request,
            form,
            f"Cancel batch {batch_id}? Its waiting jobs will never run (those running finish).",
            "Yes, cancel it",
        )
    status = app.batch_status(batch_id)
    if status is None or status.state == "ended":
        raise HTTPError(409, f"batch {batch_id} has ended or is gone: nothing to cancel")
    try:
        n = app.cancel_batch(batch_id)
    except BatchClosed:
        raise HTTPError(409, f"batch {batch_id} is gone: nothing to cancel") from None
    return back(request, form, f"batch {batch_id} cancelled: {n} waiting jobs will never run")


def close_batch(app: App, request: Request, form: dict[str, str]) -> Rendered:
    batch_id = _form_batch(form)
    try:
        app.close_batch(batch_id)
    except BatchClosed:
        raise HTTPError(409, f"batch {batch_id} is gone: nothing to close") from None
    return back(request, form, f"batch {batch_id} closed: no job joins it now")
