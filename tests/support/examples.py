"""How many examples a property test tries: ``n`` scaled by ``$FASTQ_TEST_EXAMPLES``
(a fraction; 1 unless set). CI sets it below 1: on a 2-core machine these tests
were over a tenth of the suite's CPU time, and each run draws other examples, so
runs after runs still cover the space a full count covers in one."""

from __future__ import annotations

import os


def examples(n: int) -> int:
    scale = float(os.environ.get("FASTQ_TEST_EXAMPLES", "1"))
    if not 0 < scale <= 1:
        raise ValueError(f"FASTQ_TEST_EXAMPLES must be within (0, 1], not {scale}")
    return max(10, round(n * scale))
