"""What a registered job is held to: a function a worker can run, how often it may
run (delivery), what happens when it raises (its policy), and whether arguments
bind to it."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Optional, Sequence

from fastq.retry import Backoff, Exponential, check_age_limit_s, check_retries


def check_runnable(fn: object, name: str) -> bool:
    """Refuse what a worker cannot run as it stands; say whether it is async.

    A worker calls a job and takes what it returns as done, or awaits it when the
    function is a coroutine function (``async def``, also behind
    ``functools.partial`` or as an object's ``__call__``). A generator function
    would return a generator nobody iterates (an async one, an async generator
    nobody iterates), and the job would count as processed though nothing ran.

    Returns:
        True for a coroutine function: a worker runs it on its event loop.

    Raises:
        TypeError: ``fn`` is not callable, or is a generator function (sync or async).
    """
    if not callable(fn):
        raise TypeError(f"cannot register job {name!r}: {fn!r} is not callable")
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    call = None if inspect.isroutine(target) or inspect.isclass(target) else type(target).__call__
    is_async = False
    for candidate in (target, call):
        if candidate is None:
            continue
        if inspect.isasyncgenfunction(candidate):
            kind = "an async generator function"
        elif inspect.isgeneratorfunction(candidate):
            kind = "a generator function"
        else:
            is_async = is_async or inspect.iscoroutinefunction(candidate)
            continue
        raise TypeError(
            f"cannot register job {name!r}: {fn!r} is {kind}, and a worker calls a job "
            "and takes its return as done, so nothing would run; register a plain "
            "function or an async def"
        )
    return is_async


class Delivery(str, Enum):
    """How often a job may run: at least once (the default: a job whose worker dies
    runs again) or at most once (it is taken out of the queue before it runs and
    never runs again: a worker's death loses it)."""

    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


def check_delivery(delivery: object) -> Delivery:
    """``delivery`` as a :class:`Delivery`.

    Raises:
        TypeError: it is not a string.
        ValueError: it is not ``"at_least_once"`` or ``"at_most_once"``.
    """
    if not isinstance(delivery, str):
        raise TypeError(f"delivery must be 'at_least_once' or 'at_most_once', not {delivery!r}")
    try:
        return Delivery(delivery)
    except ValueError:
        raise ValueError(
            f"delivery must be 'at_least_once' or 'at_most_once', not {delivery!r}"
        ) from None


@dataclass(frozen=True)
class JobPolicy:
    """What happens when a job raises.

    ``retries`` further attempts after the first, spaced by ``backoff`` (a
    :class:`fastq.retry.Backoff`: exponential with jitter unless told otherwise).
    Exceptions in ``fail_on`` fail the job at once; then those outside
    ``retry_on`` too. With ``age_limit_s``, a retry is scheduled only if it would
    start within that many seconds of the job's first enqueue, whatever its
    attempts; else the job goes dead saying so.

    Raises:
        TypeError, ValueError: a setting of the wrong type or out of range.
    """

    retries: int = 5
    backoff: Backoff = Exponential()
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout_s: Optional[float] = None
    fail_on: tuple[type[BaseException], ...] = ()
    age_limit_s: Optional[float] = None

    def __post_init__(self) -> None:
        check_retries(self.retries)
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"backoff must be a fastq retry policy, not {self.backoff!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {self.timeout_s!r}")
        for what in ("retry_on", "fail_on"):
            types = getattr(self, what)
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                raise TypeError(f"{what} must be a tuple of exception classes, not {types!r}")
        if self.age_limit_s is not None:
            check_age_limit_s(self.age_limit_s)


class ArgChecker:
    """Checks that arguments bind to a function's signature, fast for the common case.

    A blast calls this per job, so plain positional functions are checked by
    counting; anything else goes through ``inspect.Signature.bind``.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._name = getattr(fn, "__name__", repr(fn))
        try:
            self._signature: Optional[inspect.Signature] = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins without a signature: accept anything
            self._signature = None
            self._counts: Optional[tuple[int, int]] = None
            return
        params = list(self._signature.parameters.values())
        simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        required = sum(1 for p in params if p.default is p.empty)
        self._counts = (required, len(params)) if simple else None

    @property
    def counts(self) -> Optional[tuple[int, int]]:
        """``(required, all)`` positional parameters when a call binds by its count of
        positional arguments alone (no ``*args``, keyword-only or ``**kwargs``)."""
        return self._counts

    def check(self, args: Sequence[Any], kwargs: Optional[dict[str, Any]]) -> None:
        """Raise TypeError naming the function when the arguments do not bind."""
        if self._signature is None:
            return
        if not kwargs and self._counts is not None:
            low, high = self._counts
            if low <= len(args) <= high:
                return
        try:
            self._signature.bind(*args, **(kwargs or {}))
        except TypeError as exc:
            raise TypeError(f"arguments do not fit {self._name}{self._signature}: {exc}") from None

    def binds(self, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
        try:
            self.check(args, kwargs)
        except TypeError:
            return False
        return True
