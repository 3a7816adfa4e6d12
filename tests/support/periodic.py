"""What the periodic tests share: the runs their apps record (``tests/apps/
periodic_jobs.py``, ``clock_ticks.py``) and which slots of a 1 s schedule ran."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

_SKIPPED = re.compile(r"slot (\d+) skipped, its last run is still queued or running")


def recorded_runs(client: Any, namespace: str) -> list[tuple[int, float]]:
    """(slot, when its run started), both in Unix ms, of every run recorded so far."""
    runs = []
    for raw in client.lrange(f"{namespace}:ticks", 0, -1):
        slot, started = raw.split()
        runs.append((int(slot), float(started)))
    return runs


def check_each_slot_once(slots: list[int], log: str, every_ms: int = 1000) -> None:
    """Every slot from the first run to the last ran once, or was skipped by the
    no-stacking rule (its previous run was still queued or running when it fell due,
    which a loaded machine can make happen; the firer logs each such slot)."""
    counted = Counter(slots)
    assert set(counted.values()) == {1}, f"a slot fired twice: {counted}\n{log}"
    skipped = {int(s) for s in _SKIPPED.findall(log)}
    assert not skipped & set(counted), f"a slot both skipped and run: {skipped}\n{log}"
    expected = set(range(min(counted), max(counted) + 1, every_ms))
    missed = sorted(expected - set(counted) - skipped)
    assert not missed, f"slots missed: {missed}\n{log}"
