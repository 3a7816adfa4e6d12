"""fastq's test suite. A package, so that what the tests share imports by one name
from anywhere (``tests.support``, ``tests.apps``), in pytest's process, in its xdist
workers and in the ``fastq`` subprocesses the tests start."""
