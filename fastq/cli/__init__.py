"""The ``fastq`` command (rank 9: the top)."""
