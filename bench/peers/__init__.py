"""The peer harness (``python -m bench.peers.run``): the same workloads with fastq
and the queues users compare it with, each peer from its own virtualenv. Its
``drivers/`` are no package: the peers' workers import them from their
``PYTHONPATH``, in virtualenvs that have neither fastq nor bench."""
