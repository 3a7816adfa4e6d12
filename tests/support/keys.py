"""What a test's namespace holds in Redis."""

from __future__ import annotations

import redis


def namespace_keys(client: redis.Redis, namespace: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{namespace}:*", count=1000))
