"""The HTTP API, ``fastq serve``: for producers and workers of any language."""
