"""``fastq serve``: the HTTP API for producers and workers of any language
(:mod:`fastq.serve.api`), and the dashboard (:mod:`fastq.serve.pages`)."""
