"""The pre-forking master (``fastq pool``): children, hand-backs, the start-up ramp,
the metrics exporter (rank 8)."""
