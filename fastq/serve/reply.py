"""What every reply of ``fastq serve`` shares, the API's and the pages': the one
JSON encoder (:class:`JSONReply`) and the one refusal (:class:`HTTPError`), whose
JSON is ``{"error": "...", ...}``."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.responses import Response


class JSONReply(Response):
    """A JSON response, encoded by orjson (a value it cannot encode, such as an
    integer beyond 64 bits in a job's kept result, by the standard library)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


class HTTPError(Exception):
    """A refusal, the server's one: the API answers it as ``{"error": message,
    **more}`` with ``status`` (:func:`error_reply`); the dashboard's pages show
    ``message`` (a 404 as a page of nothing, any other refusal of an action on the
    page it came from)."""

    def __init__(self, status: int, message: str, **more: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.more = more


def problem(message: str, **more: Any) -> dict[str, Any]:
    """The one problem shape of the API: ``{"error": message, **more}`` (``more``:
    what a refusal names, such as the ``written`` ids or a batch's ``state``)."""
    return {"error": message, **more}


def error_reply(status: int, message: str, **more: Any) -> JSONReply:
    """The reply of a refusal: its :func:`problem` with ``status``."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONReply(problem(message, **more), status_code=status, headers=headers)
