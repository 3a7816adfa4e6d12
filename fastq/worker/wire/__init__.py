"""The worker's round trip on the wire: one Redis node, or a Redis Cluster's nodes."""
