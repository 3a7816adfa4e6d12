"""Reaching Redis: URLs, clients (plain, TLS, Sentinel, Cluster), what its replies
mean (fault classes, outages), start-up checks (rank 1: above the leaves only)."""
