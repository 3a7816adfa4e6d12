"""The reaper: lapsed leases back to their queue, due jobs promoted, periodic jobs
fired (rank 7, beside the worker)."""
