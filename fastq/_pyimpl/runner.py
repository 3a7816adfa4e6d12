"""The per-job loop of the sync runner: the reference of ``fastq_ext.runner``.

:func:`run_jobs` runs the plain jobs of a batch itself (no rate key, no timeout,
no result kept, no job hook: the common case) and hands every other job to
``run_other``, the runner's general path. It records what it can in ``out`` and
leaves the batch's setup and teardown (the job context, the heartbeat slot's idle,
what a stop or a job's BaseException leaves) to :meth:`fastq.runners.sync.SyncRunner.run`,
which reads ``cursor.index`` to know which job was in hand.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

# Taken by the loop to reach each job, and by hand_back_rest() to cut the batch: the
# native loop needs no lock (it holds the GIL throughout, so does its cut).
_ADVANCE = threading.Lock()


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
) -> int:
    """Run ``runnable`` in order; returns how many were reached: ``len(runnable)``,
    or the index of the first job left unstarted because ``owner.stopping`` was
    set before it.

    Before each job ``cursor.index`` is set to it. A plain job (``plain_of(job)``,
    cached in ``plain`` per job definition) is noted in the heartbeat ``slot`` and
    run: returning anything but one of ``outcomes`` appends its id to ``out.done``
    (its run and attempt to ``out.runs``, as ``out.note_done`` does; and notes it
    finished in the ``slot``);
    returning an outcome, or raising one of ``failures``, goes to
    ``settle(out, id, job, args, kwargs, attempt, env, exc)``. Anything else a
    job raises propagates, with ``cursor.index`` on that job.
    """
    done = out.done.append
    runs = out.runs
    monotonic = time.monotonic
    last: Optional[Any] = None
    last_plain = False
    i = -1
    while True:
        i += 1
        with _ADVANCE:  # hand_back_rest() cuts the list at a job boundary only
            cursor.index = i
            if owner.stopping:
                return i
            if i >= len(runnable):  # the end, or the rest was handed back
                return i
            job = runnable[i]
        job_id, target, args, kwargs, attempt, env = job
        if target is not last:
            known = plain.get(target)
            if known is None:
                known = plain[target] = plain_of(target)
            last, last_plain = target, known
        if not last_plain:
            run_other(out, queue, queue_index, job)
            continue
        if slot is not None:
            slot.start_job(queue_index, job_id, None)
        started = monotonic()
        try:
            result = target.fn(*args, **kwargs)
        except failures as exc:
            settle(out, job_id, target, args, kwargs, attempt, env, exc)
            continue
        if result is None or not isinstance(result, outcomes):
            run_ms = int((monotonic() - started) * 1000.0)
            if attempt != 1:
                runs[job_id] = (run_ms, attempt)
            elif run_ms > 0:
                runs[job_id] = run_ms
            done(job_id)
            if slot is not None:
                slot.finished(queue_index, job_id)
        else:
            settle(out, job_id, target, args, kwargs, attempt, env, result)


def hand_back_rest(cursor: Any, index: int) -> list[Any]:
    """Cut the jobs after ``index`` from the batch ``cursor`` runs, if its job in
    hand is still ``index``: they will not run here (the caller hands them back).
    Returns them (none if the loop moved on, or nothing follows). The loop reaches
    its next job only through the same lock, so the two never cross."""
    with _ADVANCE:
        runnable = cursor.runnable
        if cursor.index != index or len(runnable) <= index + 1:
            return []
        rest: list[Any] = runnable[index + 1 :]
        del runnable[index + 1 :]
        return rest
