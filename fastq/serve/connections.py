"""What bounds a client of ``fastq serve`` before a request reaches the app: a
deadline on each request's headers (uvicorn has none: its keep-alive timer starts
only after a response, and a byte of a header stops it), beside uvicorn's own
``limit_concurrency``. The body's deadline is the guard's
(:mod:`fastq.serve.guard`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

# the default time a connection has to send a request's headers: from its opening,
# and from the end of each response on a connection kept alive
DEFAULT_HEADERS_TIMEOUT_S = 10.0


def bounded_protocol(headers_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline on each request's headers:
    a connection that has not sent a whole request head ``headers_timeout_s`` after
    it opened, or after its last response ended, is closed."""

    class Bounded(H11Protocol):
        _headers_deadline: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_headers()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._await_headers()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._headers_deadline is not None:
                self._headers_deadline.cancel()
            super().connection_lost(exc)

        def _await_headers(self) -> None:
            if self._headers_deadline is not None:
                self._headers_deadline.cancel()
            # the request in hand when the timer starts: a new one's head replaces it
            self._headers_deadline = self.loop.call_later(
                headers_timeout_s, self._headers_late, self.scope
            )

        def _headers_late(self, scope_then: Any) -> None:
            self._headers_deadline = None
            if self.scope is scope_then and not self.transport.is_closing():
                self.transport.close()

    return Bounded
