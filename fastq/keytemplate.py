"""Keys formatted from a job's arguments: ``@app.job(rate_key="smtp:{account}")``
and ``@app.job(group="{tenant_id}")`` name a resource or a group by the job's own
parameters. One :class:`KeyTemplate` checks the template against the function's
signature when the job is registered, and formats it from the arguments (bound
to the signature, defaults applied)."""

from __future__ import annotations

import hashlib
import inspect
import string
from typing import Any, Callable, Optional

MAX_TEMPLATE_CHARS = 200
# A formatted key longer than this is replaced by its SHA-1 (arguments may be long).
MAX_KEY_CHARS = 200


def bounded(key: str) -> str:
    """``key``, or its ``sha1:`` digest if it is longer than :data:`MAX_KEY_CHARS`."""
    if len(key) > MAX_KEY_CHARS:
        return "sha1:" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key


class KeyTemplate:
    """A template of ``{name}`` fields of a function's parameters; ``what`` names
    the option in errors (``rate_key``, ``group``).

    Raises:
        TypeError: ``template`` is not a str.
        ValueError: it is empty or too long, or holds a field that is not a plain
            ``{name}`` of one of the function's parameters (no positional ``{0}``,
            attribute, index, conversion or format spec).
    """

    __slots__ = ("template", "_signature")

    def __init__(self, fn: Callable[..., Any], template: object, what: str) -> None:
        if not isinstance(template, str):
            raise TypeError(f"{what} must be a str, not {template!r}")
        if not 1 <= len(template) <= MAX_TEMPLATE_CHARS:
            raise ValueError(f"{what} must be 1 to {MAX_TEMPLATE_CHARS} characters")
        try:
            signature: Optional[inspect.Signature] = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        params = set(signature.parameters) if signature is not None else set()
        try:
            fields = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ValueError(f"{what} {template!r} is not a format string: {exc}") from None
        for _, field, spec, conversion in fields:
            if field is None:
                continue
            if not field.isidentifier() or spec or conversion:
                raise ValueError(
                    f"{what} {template!r}: {{{field}}} is not a plain {{name}} of a parameter"
                )
            if field not in params:
                raise ValueError(
                    f"{what} {template!r}: {field!r} is not a parameter of the job "
                    f"(its parameters: {', '.join(sorted(params)) or 'none'})"
                )
        self.template = template
        self._signature = signature

    def format(self, args: Any, kwargs: Optional[dict[str, Any]]) -> Optional[str]:
        """The key of a job called with these arguments; None when they do not bind."""
        if self._signature is None:
            return self.template
        try:
            bound = self._signature.bind(*args, **(kwargs or {}))
        except TypeError:
            return None
        bound.apply_defaults()
        return self.template.format(**bound.arguments)
