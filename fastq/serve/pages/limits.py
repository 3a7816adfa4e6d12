"""The Limits page: the keys of per-key rate limits given a rate of their own
(``app.set_key_rate_limit``: shown, set and lifted here), and the circuit breakers
open or half-open (``app.circuits()``)."""

from __future__ import annotations

from starlette.requests import Request

from fastq.app import App
from fastq.serve.pages.handler import Rendered, back
from fastq.serve.reply import HTTPError
from fastq.validate import parse_rate_limit


def limits(app: App, request: Request, form: dict[str, str]) -> Rendered:
    rates = app.key_rate_limits()
    circuits = app.circuits()
    return "limits.html", {
        "page": "limits",
        "rates": sorted(rates.items()),
        "circuits": sorted(circuits.items()),
    }


def key_rate(app: App, request: Request, form: dict[str, str]) -> Rendered:
    """Set (``rate``: e.g. ``20/s``) or lift (``off`` or empty) one key's own rate."""
    key = form.get("key", "").strip()
    text = form.get("rate", "").strip()
    burst_text = form.get("burst", "").strip()
    try:
        if not text or text.lower() == "off":
            app.set_key_rate_limit(key, None)
            return back(request, form, f"{key}: its jobs' own rate")
        if burst_text and not (burst_text.isascii() and burst_text.isdigit()):
            raise ValueError(f"burst must be a whole number, not {burst_text!r}")
        limit = parse_rate_limit(text, int(burst_text) if burst_text else None)
        app.set_key_rate_limit(key, limit.rate, per_s=limit.period_ms / 1000, burst=limit.burst)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"rate of {key!r} not set: {exc}") from None
    return back(request, form, f"{key}: at most {limit}, across every worker")
