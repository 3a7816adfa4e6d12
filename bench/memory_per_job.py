"""Redis memory per queued job: ``INFO memory`` ``used_memory`` before and after
``enqueue_many`` of N jobs, and where the bytes go (``MEMORY USAGE`` of each key of
the queue, the encoding of the jobs hash and the ready list, one envelope printed).

Two payloads, each on a fresh throwaway ``redis-server`` (never the Redis on port
6379), so that neither run inherits the other's allocator state:

- mailing  ``send_email("user123@example.com", "Your weekly digest", 42)``: about
           60 bytes of job name and arguments, what a blast of emails queues
- 1kb      the same call with a 1,000-byte body argument

    python -m bench.memory_per_job                  # 1,000,000 jobs of each
    python -m bench.memory_per_job --quick          # 20,000 jobs of each
    python -m bench.memory_per_job --jobs 200000 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Optional

import orjson
import redis

import fastq
from bench.harness import add_json_option, announce, write_report
from fastq.testing.redis_server import RedisServer

QUEUE = "mail"
NAMESPACE = "mem"
CHUNK = 100_000  # enqueue_many calls of this many jobs (the producer's memory stays small)
SUBJECT = "Your weekly digest"
BODY_1KB = "x" * 1000
PEERS = {"huey": 181, "BullMQ": 292, "Dramatiq": 468}  # bytes/job, mailing payload (issue 12)
ENVELOPE_SHOWN = 240  # characters of an envelope printed
MEMORY_SAMPLES = 1000  # MEMORY USAGE ... SAMPLES: elements looked at per big key


def payloads() -> dict[str, Any]:
    """Name -> a function of i giving the call's arguments."""
    return {
        "mailing": lambda i: (f"user{i % 1000}@example.com", SUBJECT, 42),
        "1kb": lambda i: (f"user{i % 1000}@example.com", SUBJECT, 42, BODY_1KB),
    }


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def measure(n: int, name: str, args_of: Any) -> dict[str, Any]:
    """Enqueue ``n`` jobs on a fresh server; the memory they take, and where."""
    server = RedisServer().start()
    try:
        app = fastq.App(server.url, namespace=NAMESPACE)

        @app.job(queue=QUEUE)
        def send_email(to: str, subject: str, n: int, body: str = "") -> None:
            """The job (never run here)."""

        client = redis.Redis.from_url(server.url)
        app.redis.ping()  # the producer's connection and script loads before the baseline
        send_email.enqueue_many([args_of(0)])
        client.flushdb()
        before = used_memory(client)
        t0 = time.perf_counter()
        for start in range(0, n, CHUNK):
            send_email.enqueue_many([args_of(i) for i in range(start, min(n, start + CHUNK))])
        enqueue_s = time.perf_counter() - t0
        after = used_memory(client)
        keys = app.keys(QUEUE)
        if int(client.llen(keys.ready)) != n:
            raise SystemExit(f"{name}: {client.llen(keys.ready)} of {n} jobs ready")
        breakdown = {}
        for key in sorted(client.scan_iter(match=f"{NAMESPACE}:*", count=1000)):
            k = key.decode()
            usage = client.memory_usage(k, samples=MEMORY_SAMPLES) or 0
            kind = client.type(k).decode()
            size = {"hash": client.hlen, "list": client.llen, "zset": client.zcard}.get(
                kind, lambda _k: 1
            )(k)
            breakdown[k] = {
                "type": kind,
                "encoding": client.object("encoding", k).decode(),
                "entries": int(size),
                "bytes": int(usage),
                "bytes_per_job": usage / n,
            }
        job_id = client.lindex(keys.ready, 0)
        envelope = client.hget(keys.jobs, job_id)
        app.close()
        client.close()
    finally:
        server.cleanup()
    assert job_id is not None and envelope is not None
    return {
        "payload": name,
        "jobs": n,
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_job": (after - before) / n,
        "enqueue_jobs_s": n / enqueue_s,
        "keys": breakdown,
        "job_id": job_id.decode(),
        "job_id_bytes": len(job_id),
        "envelope": envelope.decode(errors="replace"),
        "envelope_bytes": len(envelope),
        "call_json_bytes": len(orjson.dumps(["send_email", list(args_of(123))])),
    }


def print_result(r: dict[str, Any]) -> None:
    n = r["jobs"]
    print(
        f"\n{r['payload']}: {n:,} jobs queued ({r['enqueue_jobs_s']:,.0f} jobs/s); "
        f"used_memory {r['used_memory_before']:,} → {r['used_memory_after']:,} bytes: "
        f"{r['bytes_per_job']:.1f} bytes/job"
    )
    print(
        f"  job name + arguments as JSON: {r['call_json_bytes']} bytes; "
        f"envelope {r['envelope_bytes']} bytes; job id {r['job_id_bytes']} bytes"
    )
    print(f"  {'key':<28}{'type':>6}{'encoding':>12}{'entries':>11}{'bytes':>14}{'per job':>10}")
    for key, k in r["keys"].items():
        short = key.split(":", 1)[1]
        print(
            f"  {short:<28}{k['type']:>6}{k['encoding']:>12}{k['entries']:>11,}"
            f"{k['bytes']:>14,}{k['bytes_per_job']:>10.1f}"
        )
    shown = r["envelope"]
    if len(shown) > ENVELOPE_SHOWN:  # the 1 KB body, cut short
        shown = f"{shown[:ENVELOPE_SHOWN]}… ({len(shown) - ENVELOPE_SHOWN:,} more characters)"
    print(f"  one envelope (id {r['job_id']}):\n    {shown}")


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=1_000_000)
    parser.add_argument("--only", help="comma-separated payloads (mailing,1kb)")
    parser.add_argument("--quick", action="store_true", help="20,000 jobs of each")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = min(args.jobs, 20_000)
    names = list(payloads())
    args.payloads = names if not args.only else [p for p in names if p in args.only.split(",")]
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    probe = RedisServer().start()
    try:
        with redis.Redis.from_url(probe.url) as client:
            machine, source = announce(
                client,
                "fastq Redis memory per queued job",
                f"{args.jobs:,} jobs of each payload ({', '.join(args.payloads)}), each on a "
                "throwaway redis-server of its own",
            )
    finally:
        probe.cleanup()
    results = {}
    for name in args.payloads:
        results[name] = r = measure(args.jobs, name, payloads()[name])
        print_result(r)
    targets: dict[str, Any] = {}
    mailing = results.get("mailing")
    if mailing:
        lowest = min(PEERS, key=lambda p: PEERS[p])
        value = mailing["bytes_per_job"]
        ok = value <= PEERS[lowest]
        peers = ", ".join(f"{p} {b}" for p, b in PEERS.items())
        print("\ntargets (informational; the exit status does not depend on them):")
        print(
            f"  mailing bytes/job <= the lowest peer's ({lowest}, {PEERS[lowest]}; {peers},"
            f" measured in issue 12)  {value:.0f}  {'PASS' if ok else 'BELOW'}"
        )
        targets["mailing_vs_lowest_peer"] = {"value": value, "peer": lowest, "pass": ok}
    report = {
        "machine": machine,
        "source": source,
        "options": {"jobs": args.jobs, "payloads": args.payloads, "quick": args.quick},
        "payloads": results,
        "targets": targets,
    }
    write_report(report, "memory_per_job", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
