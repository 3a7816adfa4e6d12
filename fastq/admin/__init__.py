"""What an operator does to queues and jobs: stats, inspect, cancel, pause, rate
limits, purge, revive (rank 4: above the protocol, below the app)."""
