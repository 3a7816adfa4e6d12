"""A client made once per process, on first use, and never shared across a fork."""

from __future__ import annotations

import os
import threading
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")

# Jobs in threads (--threads) may all reach for a client first at once: one client
# is made, or a second one, dropped, closes its pool under the first's calls.
_lock = threading.Lock()


def _fresh_lock() -> None:
    global _lock
    _lock = threading.Lock()  # a child never inherits it held by another thread


os.register_at_fork(after_in_child=_fresh_lock)


class PerProcess(Generic[T]):
    """One ``T`` per process: made by ``get``'s ``make`` on first use in each process
    (a child after fork makes its own, never using its parent's socket)."""

    def __init__(self) -> None:
        self._value: Optional[T] = None
        self._pid = -1

    def get(self, make: Callable[[], T]) -> T:
        value = self._value
        if value is not None and self._pid == os.getpid():
            return value
        with _lock:
            if self._value is None or self._pid != os.getpid():
                self._value = make()
                self._pid = os.getpid()
            return self._value

    def take(self) -> Optional[T]:
        """Forget the value: this process's (for its owner to close), or ``None``
        (none made, or the parent's: not this process's to close)."""
        value, mine = self._value, self._pid == os.getpid()
        self._value = None
        return value if mine else None
