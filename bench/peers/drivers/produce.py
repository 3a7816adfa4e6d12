"""``python produce.py <tasks module> <n> [noop|io|mail]``: the peer's producer
enqueues ``n`` jobs of that kind (``counting.jobs``) with its bulk API and prints
how long it took (the module is imported under its own name, so the worker finds
the same job by the same name)."""

from __future__ import annotations

import importlib
import sys

if __name__ == "__main__":
    importlib.import_module(sys.argv[1]).enqueue(int(sys.argv[2]), *sys.argv[3:])
