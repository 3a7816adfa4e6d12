"""The claim loop and its round trip: one Redis round trip acknowledges a batch and
claims the next (rank 7: above the runners)."""
