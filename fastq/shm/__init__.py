"""What a pool's master and its children share in memory: heartbeats, metrics
counters, CPU slots (rank 3, beside the job model)."""
