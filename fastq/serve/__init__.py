"""The HTTP API (an optional extra: ``pip install fastq[web]``)."""
