"""The only importer of ``fastq_ext``: picks the native kernels or the reference.

The compiled extension is required unless ``FASTQ_NO_EXTENSIONS=1`` is set: a
silent fallback to pure Python would quietly ruin every benchmark.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["ACCELERATED", "backoff", "codec", "ids", "runner"]

ACCELERATED: bool = os.environ.get("FASTQ_NO_EXTENSIONS", "") in ("", "0")
_package = "fastq_ext" if ACCELERATED else "fastq._pyimpl"

try:
    codec: ModuleType = importlib.import_module(f"{_package}.codec")
    backoff: ModuleType = importlib.import_module(f"{_package}.backoff")
    runner: ModuleType = importlib.import_module(f"{_package}.runner")
    ids: ModuleType = importlib.import_module(f"{_package}.ids")
except ImportError as exc:  # pragma: no cover - depends on the build
    if not ACCELERATED:
        raise
    raise ImportError(
        "fastq's compiled extension (fastq_ext) is not built: install fastq with "
        "`pip install .` (needs a C compiler and the Python headers, e.g. "
        "`apt-get install build-essential python3-dev`), or in a source checkout run "
        "`python setup.py build_ext --inplace`. Set FASTQ_NO_EXTENSIONS=1 to run the "
        f"slower pure-Python reference instead. ({exc})"
    ) from exc
