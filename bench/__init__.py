"""fastq's benchmarks, run from the repository's top as ``python -m bench.<name>``
(``bench/README.md`` lists them). ``bench.harness`` holds what they share;
``bench.jobs`` the apps the pools under test import (``--app bench.jobs.<name>``)."""
