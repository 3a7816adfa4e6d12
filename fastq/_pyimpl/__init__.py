"""Pure-Python reference implementations of the ``fastq_ext`` kernels.

Selected only with ``FASTQ_NO_EXTENSIONS=1``; tests check that both agree.
"""
