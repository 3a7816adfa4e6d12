"""The dashboard's routes, in one table: each path, its view and its methods (a
page or fragment is a GET, an action a POST). A route is named after its view:
the templates' and the views' links name it (:func:`fastq.serve.pages.handler.url_for`).
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from fastq.serve.pages import batches, jobs, limits, login, queues, workers
from fastq.serve.pages.handler import SERVE_DIR, page

ROUTES: list[BaseRoute] = [
    Route("/", page(queues.overview), methods=["GET"]),
    Route("/login", page(login.login, public=True), methods=["GET", "POST"]),
    Route("/logout", page(login.logout, public=True), methods=["POST"]),
    Route("/_/queues", page(queues.overview_fragment), methods=["GET"]),
    Route("/_/history", page(queues.history), methods=["GET"]),
    Route("/queues/{queue}", page(queues.queue_page), methods=["GET"]),
    Route("/_/queues/{queue}", page(queues.queue_fragment), methods=["GET"]),
    Route("/queues/{queue}/pause", page(queues.pause), methods=["POST"]),
    Route("/queues/{queue}/resume", page(queues.resume), methods=["POST"]),
    Route("/queues/{queue}/rate_limit", page(queues.rate_limit), methods=["POST"]),
    Route("/queues/{queue}/purge", page(queues.purge), methods=["POST"]),
    Route("/queues/{queue}/pause-group", page(queues.pause_group), methods=["POST"]),
    Route("/queues/{queue}/resume-group", page(queues.resume_group), methods=["POST"]),
    Route("/jobs/{job_id:path}", page(jobs.job_page), methods=["GET"]),
    Route("/actions/retry", page(jobs.retry_job), methods=["POST"]),
    Route("/actions/cancel", page(jobs.cancel_job), methods=["POST"]),
    Route("/actions/delete", page(jobs.delete_job), methods=["POST"]),
    Route("/batches", page(batches.batches), methods=["GET"]),
    Route("/_/batches", page(batches.batches_fragment), methods=["GET"]),
    Route("/batches/{batch_id:path}", page(batches.batch_page), methods=["GET"]),
    Route("/_/batches/{batch_id:path}", page(batches.batch_fragment), methods=["GET"]),
    Route("/actions/cancel-batch", page(batches.cancel_batch), methods=["POST"]),
    Route("/actions/close-batch", page(batches.close_batch), methods=["POST"]),
    Route("/workers", page(workers.workers), methods=["GET"]),
    Route("/_/workers", page(workers.workers_fragment), methods=["GET"]),
    Route("/periodic", page(workers.periodic), methods=["GET"]),
    Route("/limits", page(limits.limits), methods=["GET"]),
    Route("/actions/key-rate", page(limits.key_rate), methods=["POST"]),
    Mount("/static", StaticFiles(directory=str(SERVE_DIR / "static")), name="static"),
]
