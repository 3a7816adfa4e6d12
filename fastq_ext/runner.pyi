"""Typed stub of the native runner loop (same API as ``fastq._pyimpl.runner``)."""

from typing import Any, Callable

def run_jobs(
    runnable: list[Any],
    out: Any,
    owner: Any,
    cursor: Any,
    slot: Any,
    queue: str,
    queue_index: int,
    plain: dict[Any, bool],
    plain_of: Callable[[Any], bool],
    run_other: Callable[[Any, str, int, Any], None],
    settle: Callable[..., None],
    failures: tuple[type[BaseException], ...],
    outcomes: tuple[type[BaseException], ...],
) -> int: ...
def hand_back_rest(cursor: Any, index: int) -> list[Any]: ...
