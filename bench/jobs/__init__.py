"""The apps the benchmarks' pools import (``--app bench.jobs.<name>``), and the
benchmarks themselves, to enqueue the same jobs. Each reads its Redis URL from
``FASTQ_REDIS_URL``, as a deployed pool does."""
