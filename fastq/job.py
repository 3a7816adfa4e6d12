"""Registered jobs: the function, its retry policy, and argument checks."""

from __future__ import annotations

import inspect
import itertools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

if TYPE_CHECKING:
    from fastq.app import App

R = TypeVar("R")


@dataclass(frozen=True)
class JobPolicy:
    """What happens when a job raises.

    ``retries`` further attempts after the first, spaced by exponential backoff
    from ``backoff_s`` up to ``max_backoff_s``, the top ``jitter`` fraction of each
    delay randomised. Exceptions outside ``retry_on`` fail the job at once.
    """

    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    jitter: float = 0.5
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout_s: Optional[float] = None

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an int >= 0, not {self.retries!r}")
        for field in ("backoff_s", "max_backoff_s"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{field} must be a number >= 0, not {value!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], not {self.jitter!r}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, not {self.timeout_s!r}")
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in self.retry_on):
            raise TypeError("retry_on must be a tuple of exception classes")

    @property
    def backoff_ms(self) -> int:
        return int(self.backoff_s * 1000)

    @property
    def max_backoff_ms(self) -> int:
        return int(self.max_backoff_s * 1000)


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


class JobDef(Generic[R]):
    """A function registered with ``@app.job``.

    Calling it runs the function here and now; ``enqueue`` sends it to a worker.
    """

    def __init__(
        self,
        app: App,
        fn: Callable[..., R],
        name: str,
        queue: str,
        priority: int,
        policy: JobPolicy,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.priority = priority
        self.policy = policy
        self.arg_checker = ArgChecker(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<fastq job {self.name!r} queue={self.queue!r}>"

    def enqueue(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue one call of this job; returns its id.

        Raises:
            TypeError: the arguments do not fit the function, or are not JSON-serializable.
            fastq.RedisUnavailable: Redis could not be reached.
        """
        return self.app.enqueue(self.name, args, kwargs)

    def enqueue_many(
        self,
        calls: Iterable[Any],
        *,
        job_ids: Optional[Sequence[str]] = None,
        priority: Optional[int] = None,
        delay_s: float = 0,
    ) -> list[str]:
        """Enqueue many calls in pipelined batches (for blasts); returns their ids.

        Each call is a tuple of positional arguments or a dict of keyword
        arguments. Every call is checked and encoded before anything is sent, so
        a bad one raises and nothing is enqueued.
        """
        return self.app.enqueue_many(
            self.name, calls, job_ids=job_ids, priority=priority, delay_s=delay_s
        )


class IdGenerator:
    """Job ids: a random per-process prefix and a counter, renewed after fork."""

    def __init__(self) -> None:
        self._pid = -1
        self._prefix = ""
        self._counter: Iterable[int] = iter(())

    def _reseed(self) -> None:
        self._pid = os.getpid()
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def next_ids(self, n: int) -> list[str]:
        if os.getpid() != self._pid:
            self._reseed()
        prefix, counter = self._prefix, self._counter
        return [f"{prefix}{c:x}" for c in itertools.islice(counter, n)]
