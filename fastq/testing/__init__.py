"""Throwaway Redis servers and clusters for tests, fastq's own and its users' (a leaf:
it imports nothing of fastq)."""
