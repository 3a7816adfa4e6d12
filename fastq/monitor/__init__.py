"""What a long-running process keeps an eye on beside its work, each from a thread of
its own or its lease thread: whether Redis lost its data (``losses``), its entry in
the worker registry (``announcer``). The Redis calls they make are protocol's (rank 6:
shared by workers, reapers and pools, loaded by no producer)."""
