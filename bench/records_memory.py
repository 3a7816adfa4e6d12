"""Redis memory per record of an ended job (``lua/lib/records.lua``).

Drains N no-op jobs through fastq's own claim and ack scripts on a throwaway
``redis-server``, once with records kept and once with them off, and reports the
difference in ``used_memory`` per job, beside ``MEMORY USAGE`` of the records hash
(``SAMPLES 0``: every field counted), first as the acks left them (done records
logged a batch to a field) and then folded into one record per job (what the
reaper does after a drain; ``lua/lib/records.lua``). The worker id is a pool
child's, as long as they come (``host:pid:wN.M``).

    python -m bench.records_memory [-n 100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import fastq
from bench.harness import add_json_option, write_report
from fastq.protocol import records as records_of
from fastq.protocol.contracts import ACK, CLAIM
from fastq.protocol.outcomes import Outcomes
from fastq.testing.redis_server import RedisServer

WORKER = f"{socket.gethostname()}:123456:w0.1"


def drain(n: int, records: bool) -> dict[str, Any]:
    with RedisServer() as srv:
        app = fastq.App(srv.url, namespace="mem")
        app.declare_queue("bench")
        app.enqueue_many("noop", [(i,) for i in range(n)], queue="bench")
        keys = app.keys("bench")
        # every record of the run in one generation: none is retired before the end
        app.keep_records("bench", max_len=n if records else 0)
        client = app.redis
        claim_keys, ack_keys = CLAIM.keys_for(keys, WORKER), ACK.keys_for(keys, WORKER)
        client.execute_command("MEMORY", "PURGE")
        before = int(client.info("memory")["used_memory"])
        while True:
            reply = CLAIM.call(client, claim_keys, CLAIM.argv(WORKER, 100, 60000, 1000))
            if not reply.ids:
                break
            ACK.call(client, ack_keys, Outcomes(done=reply.ids).ack_argv(10**9, 1000, WORKER))
        client.execute_command("MEMORY", "PURGE")
        logged = int(client.info("memory")["used_memory"])
        logged_hash = client.memory_usage(keys.records, samples=0) or 0
        records_of.fold(client, keys)
        client.execute_command("MEMORY", "PURGE")
        after = int(client.info("memory")["used_memory"])
        hashed = client.memory_usage(keys.records, samples=0) or 0
        kept = len(records_of.recent(client, keys, None, n + 1))
        app.close()
        return {
            "logged_used_memory_delta": logged - before,
            "logged_hash_bytes": logged_hash,
            "used_memory_delta": after - before,
            "records_hash_bytes": hashed,
            "kept": kept,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=100_000)
    add_json_option(parser)
    args = parser.parse_args()
    n = args.jobs
    on, off = drain(n, True), drain(n, False)
    per_record = (on["used_memory_delta"] - off["used_memory_delta"]) / n
    per_logged = (on["logged_used_memory_delta"] - off["logged_used_memory_delta"]) / n
    report = {
        "jobs": n,
        "on": on,
        "off": off,
        "bytes_per_record": per_record,
        "records_hash_bytes_per_record": on["records_hash_bytes"] / max(on["kept"], 1),
        "bytes_per_logged_record": per_logged,
        "logged_hash_bytes_per_record": on["logged_hash_bytes"] / n,
    }
    print(f"{n:,} jobs drained (worker id {WORKER!r}, {len(WORKER)} bytes)")
    print(f"  used_memory after - before, records on : {on['used_memory_delta']:>12,} B")
    print(f"  used_memory after - before, records off: {off['used_memory_delta']:>12,} B")
    print(
        f"  per record, logged: {per_logged:.1f} B (used_memory);"
        f" {report['logged_hash_bytes_per_record']:.1f} B (MEMORY USAGE of the hash)"
    )
    print(
        f"  per record, folded: {per_record:.1f} B (used_memory);"
        f" {report['records_hash_bytes_per_record']:.1f} B (MEMORY USAGE of the hash)"
    )
    write_report(report, "records_memory", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
