"""Which queues a server knows, at a bounded cost a request: the namespace's set of
known queues (``NS:queues``, written by every producer, ``declare_queue`` and
``PUT /api/v1/queues/{q}`` of any process) and the app's own, cached, and read
again from Redis only when a request names a queue the cache lacks. So a queue
declared elsewhere is known at its first request, with no restart; a known
queue's request costs no round trip; an unknown one's costs one read."""

from __future__ import annotations

import threading

from starlette.requests import Request

from fastq.app import App
from fastq.serve.reply import HTTPError


class KnownQueues:
    """The queues known to ``app``'s namespace (a queue is never forgotten by it, so
    a name once known stays so)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._names: frozenset[str] = frozenset()
        self._lock = threading.Lock()  # handlers run in the thread pool

    def require(self, queue: str) -> str:
        """``queue``, if the namespace knows it.

        Raises:
            HTTPError: 404 naming the known queues (``"queues"``).
        """
        if queue in self._names:
            return queue
        with self._lock:
            # "default" takes jobs unasked, as an enqueue there does
            self._names = frozenset(self.app.queues()) | {"default"}
            names = self._names
        if queue in names:
            return queue
        raise HTTPError(
            404,
            f"unknown queue {queue!r}: nothing was ever enqueued on it and it was never "
            f"declared (PUT /api/v1/queues/{queue}); a typo?",
            queues=sorted(names),
        )


def require_known(request: Request, queue: str) -> str:
    """``queue``, if the namespace of the server's app knows it (its
    :class:`KnownQueues`); else a 404 naming the known queues."""
    known: KnownQueues = request.app.state.known_queues
    return known.require(queue)
