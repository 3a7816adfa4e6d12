"""Shared by the tests on a real Redis Cluster: where a queue lives, as the cluster
itself says (``CLUSTER SLOTS``), never as the client under test thinks."""

from __future__ import annotations

from redis.cluster import key_slot

from fastq.testing.cluster_server import ClusterServer


def slot_owners(cluster: ClusterServer) -> list[tuple[int, int, int]]:
    """(first slot, last slot, port of its master), as the cluster says."""
    for port in cluster.ports:
        node = cluster.client(port)
        try:
            ranges = node.execute_command("CLUSTER", "SLOTS")  # the raw reply, not redis-py's dict
        except Exception:  # a node killed by a test: ask another
            continue
        finally:
            node.close()
        return [(int(r[0]), int(r[1]), int(r[2][1])) for r in ranges]
    raise RuntimeError("no node of the cluster answers")


def port_of(cluster: ClusterServer, queue: str) -> int:
    slot = key_slot(f"{{{queue}}}".encode())
    return next(port for lo, hi, port in slot_owners(cluster) if lo <= slot <= hi)


def queues_on_each_master(cluster: ClusterServer, prefix: str) -> dict[int, str]:
    """One queue name per master: its port -> the name."""
    owners: dict[int, str] = {}
    masters = len({port for _, _, port in slot_owners(cluster)})
    i = 0
    while len(owners) < masters:
        owners.setdefault(port_of(cluster, f"{prefix}{i}"), f"{prefix}{i}")
        i += 1
    return owners


def replicas_caught_up(cluster: ClusterServer) -> bool:
    """Has every replica the whole replication stream of its master?"""
    for port in cluster.ports:
        node = cluster.client(port)
        try:
            info = node.info("replication")
        finally:
            node.close()
        if info["role"] != "master":
            continue
        offsets = [v["offset"] for k, v in info.items() if k.startswith("slave")]
        if not offsets or min(offsets) < info["master_repl_offset"]:
            return False
    return True
