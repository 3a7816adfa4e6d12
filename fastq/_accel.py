"""The only importer of ``fastq_ext``: picks the native kernels or the reference.

The compiled extension is required unless ``FASTQ_NO_EXTENSIONS=1`` is set: a
silent fallback to pure Python would quietly ruin every benchmark.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["ACCELERATED", "backoff", "codec"]

ACCELERATED: bool
codec: ModuleType
backoff: ModuleType

if os.environ.get("FASTQ_NO_EXTENSIONS", "") not in ("", "0"):
    from fastq._pyimpl import backoff, codec

    ACCELERATED = False
else:
    try:
        from fastq_ext import backoff, codec  # type: ignore[no-redef]
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "fastq's compiled extension (fastq_ext) is not built: install fastq with "
            "`pip install .` (needs a C compiler and the Python headers, e.g. "
            "`apt-get install build-essential python3-dev`), or for a source checkout "
            "run `python setup.py build_ext --inplace`. Set FASTQ_NO_EXTENSIONS=1 to "
            f"run the slower pure-Python reference instead. ({exc})"
        ) from exc
    ACCELERATED = True
